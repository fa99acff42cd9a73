/**
 * Schedule windows (src/provider/schedule.ts): parsing with clear errors, whether a moment is inside,
 * windows past midnight and past the end of the week, and when the answer next changes. Dates are
 * built in local time, as the schedule reads them.
 */
import { describe, expect, test } from "bun:test";
import { ConfigError } from "../../../src/config/settings.ts";
import { parseWindow, Schedule } from "../../../src/provider/schedule.ts";

/** 2026-11-23 is a Monday. */
const monday = (hours: number, minutes = 0) => new Date(2026, 10, 23, hours, minutes);
const day = (offset: number, hours: number, minutes = 0) => new Date(2026, 10, 23 + offset, hours, minutes);

describe("parseWindow", () => {
  test.each([
    ["daily 09:00-17:00", [0, 1, 2, 3, 4, 5, 6], 540, 480],
    ["mon-fri 22:00-07:00", [1, 2, 3, 4, 5], 1320, 540],
    ["fri-mon 00:00-24:00", [5, 6, 0, 1], 0, 1440],
    ["SUN 23:30-00:15", [0], 1410, 45],
    ["  tue   8:05-8:06 ", [2], 485, 1],
  ])("%s", (text, days, start, length) => {
    const w = parseWindow(text);
    expect({ days: w.days, start: w.start, length: w.length }).toEqual({ days, start, length });
  });

  test.each([
    ["", "is not 'DAYS HH:MM-HH:MM'"],
    ["weekdays 09:00-17:00", "'weekdays' is not a day"],
    ["mon-fri-sat 09:00-17:00", "bad day range"],
    ["mon 09:00", "'HH:MM-HH:MM'"],
    ["mon 9-17", "is not a time"],
    ["mon 24:00-08:00", "'24:00' is not a time"],
    ["mon 08:60-09:00", "'08:60' is not a time"],
    ["mon 25:00-26:00", "is not a time"],
    ["mon 08:00-08:00", "the window is empty"],
  ])("refuses %p", (text, message) => {
    expect(() => parseWindow(text)).toThrow(ConfigError);
    expect(() => parseWindow(text)).toThrow(message);
  });
});

describe("Schedule", () => {
  test("no windows: always open, never changes", () => {
    const s = Schedule.parse([]);
    expect({ open: s.open(monday(3)), next: s.nextChange(monday(3)) }).toEqual({ open: true, next: undefined });
  });

  test("a day window: open from its start, closed at its end", () => {
    const s = Schedule.parse(["mon-fri 09:00-17:00"]);
    expect([s.open(monday(8, 59)), s.open(monday(9)), s.open(monday(16, 59)), s.open(monday(17)), s.open(day(5, 10))]).toEqual([
      false,
      true,
      true,
      false,
      false,
    ]);
  });

  test("past midnight: Friday night runs into Saturday morning, Monday early is not covered", () => {
    const s = Schedule.parse(["mon-fri 22:00-07:00"]);
    expect([s.open(monday(6)), s.open(monday(23)), s.open(day(1, 6, 59)), s.open(day(1, 7)), s.open(day(5, 6)), s.open(day(5, 7))]).toEqual(
      [false, true, true, false, true, false],
    );
  });

  test("past the end of the week: Saturday night into Sunday", () => {
    const s = Schedule.parse(["sat 20:00-04:00"]);
    expect([s.open(day(5, 20)), s.open(day(6, 3, 59)), s.open(day(6, 4)), s.open(day(-1, 3))]).toEqual([true, true, false, true]);
  });

  test("several windows: open when any holds", () => {
    const s = Schedule.parse(["mon 08:00-09:00", "mon 12:00-13:00"]);
    expect([s.open(monday(8, 30)), s.open(monday(10)), s.open(monday(12, 30))]).toEqual([true, false, true]);
  });

  test("nextChange: the window's end while open, the next start while closed", () => {
    const s = Schedule.parse(["mon-fri 09:00-17:00"]);
    expect(s.nextChange(monday(10, 20))).toEqual(monday(17));
    expect(s.nextChange(monday(17, 0))).toEqual(day(1, 9));
    expect(s.nextChange(day(5, 12))).toEqual(day(7, 9));
    // Mid-minute: the change is at the whole minute.
    expect(s.nextChange(new Date(2026, 10, 23, 8, 59, 30))).toEqual(monday(9));
  });

  test("nextChange: a window that covers the whole week never closes", () => {
    expect(Schedule.parse(["daily 00:00-24:00"]).nextChange(monday(12))).toBeUndefined();
  });
});

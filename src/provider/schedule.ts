/**
 * Schedule windows: when `umbra-provider start` may serve. Outside every window it drains (finishes
 * what it serves, disconnects) and waits; when a window opens it connects again.
 *
 * A window is `DAYS HH:MM-HH:MM` in the machine's local time: DAYS is `daily`, a day (`mon` ... `sun`)
 * or a range (`mon-fri`, `fri-mon` wraps); the end may be `24:00`; an end before the start runs past
 * midnight into the next day (`mon-fri 22:00-07:00` serves Monday night to Saturday 07:00). Several
 * windows may be given; the machine serves when any window holds. No windows: always.
 */
import { ConfigError } from "../config/settings.ts";

const DAYS = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"] as const;
const MINUTES_PER_DAY = 24 * 60;
const MINUTES_PER_WEEK = 7 * MINUTES_PER_DAY;

export interface ScheduleWindow {
  /** The text it was parsed from (for status output). */
  readonly text: string;
  /** Days the window starts on (0 = Sunday). */
  readonly days: readonly number[];
  /** Minutes after midnight. */
  readonly start: number;
  /** Length in minutes (1 .. 1440). */
  readonly length: number;
}

function dayIndex(name: string, text: string): number {
  const i = DAYS.indexOf(name as (typeof DAYS)[number]);
  if (i < 0) throw new ConfigError(`--schedule: '${text}': '${name}' is not a day (mon, tue, wed, thu, fri, sat, sun, daily)`);
  return i;
}

function minutesOf(clock: string, text: string, allow24: boolean): number {
  const m = /^(\d{1,2}):(\d{2})$/.exec(clock);
  const hours = Number(m?.[1]);
  const minutes = Number(m?.[2]);
  if (!m || minutes > 59 || hours > 24 || (hours === 24 && (minutes !== 0 || !allow24))) {
    throw new ConfigError(`--schedule: '${text}': '${clock}' is not a time (HH:MM, 00:00 to 24:00)`);
  }
  return hours * 60 + minutes;
}

/** Parses one window; throws ConfigError naming the text. */
export function parseWindow(text: string): ScheduleWindow {
  const parts = text.trim().toLowerCase().split(/\s+/);
  if (parts.length !== 2) throw new ConfigError(`--schedule: '${text}' is not 'DAYS HH:MM-HH:MM' (e.g. 'mon-fri 22:00-07:00')`);
  const [dayText, timeText] = parts as [string, string];
  let days: number[];
  if (dayText === "daily") {
    days = [0, 1, 2, 3, 4, 5, 6];
  } else if (dayText.includes("-")) {
    const [from, to, extra] = dayText.split("-");
    if (extra !== undefined || from === undefined || to === undefined) throw new ConfigError(`--schedule: '${text}': bad day range`);
    const a = dayIndex(from, text);
    const b = dayIndex(to, text);
    days = [];
    for (let d = a; ; d = (d + 1) % 7) {
      days.push(d);
      if (d === b) break;
    }
  } else {
    days = [dayIndex(dayText, text)];
  }
  const times = timeText.split("-");
  if (times.length !== 2) throw new ConfigError(`--schedule: '${text}': the time is 'HH:MM-HH:MM'`);
  const start = minutesOf(times[0] as string, text, false);
  const end = minutesOf(times[1] as string, text, true);
  if (end === start) throw new ConfigError(`--schedule: '${text}': the window is empty (start equals end)`);
  const length = end > start ? end - start : MINUTES_PER_DAY - start + end;
  return Object.freeze({ text: text.trim(), days: Object.freeze(days), start, length });
}

/** Minutes since Sunday 00:00 local time, with the seconds as a fraction. */
function weekMinute(at: Date): number {
  return at.getDay() * MINUTES_PER_DAY + at.getHours() * 60 + at.getMinutes() + (at.getSeconds() + at.getMilliseconds() / 1000) / 60;
}

/** The intervals [from, to) of a window within the week, in week minutes (one may wrap past Saturday). */
function intervals(w: ScheduleWindow): [number, number][] {
  return w.days.map((d) => {
    const from = d * MINUTES_PER_DAY + w.start;
    return [from, from + w.length];
  });
}

function inside(minute: number, [from, to]: [number, number]): boolean {
  // An interval may end past the week's end (Saturday night into Sunday): test the minute a week on too.
  return (minute >= from && minute < to) || (minute + MINUTES_PER_WEEK >= from && minute + MINUTES_PER_WEEK < to);
}

export class Schedule {
  constructor(readonly windows: readonly ScheduleWindow[]) {}

  static parse(texts: readonly string[]): Schedule {
    return new Schedule(texts.map(parseWindow));
  }

  get always(): boolean {
    return this.windows.length === 0;
  }

  /** Whether the machine may serve at `at`. */
  open(at: Date): boolean {
    if (this.always) return true;
    const m = weekMinute(at);
    return this.windows.some((w) => intervals(w).some((i) => inside(m, i)));
  }

  /**
   * When `open` next changes after `at` (a window opens or every window has closed); undefined when it
   * never does. Found minute by minute over at most a week (windows have minute resolution).
   */
  nextChange(at: Date): Date | undefined {
    if (this.always) return undefined;
    const now = this.open(at);
    // The next whole local minute, then whole minutes.
    const probe = new Date(at.getTime());
    probe.setSeconds(0, 0);
    for (let i = 1; i <= MINUTES_PER_WEEK + 1; i++) {
      const next = new Date(probe.getTime() + i * 60_000);
      if (this.open(next) !== now) return next;
    }
    return undefined;
  }
}

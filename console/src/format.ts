/** Display formats: money (micro-USD integers), counts, times (Unix seconds or ms), UTC days. */

const usd = new Intl.NumberFormat("en-US", { style: "currency", currency: "USD", minimumFractionDigits: 2, maximumFractionDigits: 6 });
const count = new Intl.NumberFormat("en-US");

export function money(micro: number | null | undefined): string {
  return micro === null || micro === undefined ? "—" : usd.format(micro / 1e6);
}

export function num(n: number | null | undefined): string {
  return n === null || n === undefined ? "—" : count.format(n);
}

/** Unix ms; a value below 1e11 is taken as seconds (the admin API's unit). */
export function toMs(t: number): number {
  return t < 1e11 ? t * 1000 : t;
}

/** "2026-11-26 17:04 UTC". */
export function time(t: number | null | undefined): string {
  if (t === null || t === undefined) return "—";
  return `${new Date(toMs(t)).toISOString().slice(0, 16).replace("T", " ")} UTC`;
}

/** Unix seconds of a "YYYY-MM-DD" UTC day's start (chart axes). */
export function daySeconds(date: string): number {
  return Date.parse(`${date}T00:00:00Z`) / 1000;
}

/** Unix ms of a "YYYY-MM-DD" UTC day's start, or undefined for "". */
export function dayMs(date: string): number | undefined {
  if (date === "") return undefined;
  const ms = Date.parse(`${date}T00:00:00Z`);
  return Number.isNaN(ms) ? undefined : ms;
}

/**
 * Waiting for a condition instead of sleeping: `waitFor` re-checks every few milliseconds and fails
 * with the condition's description when it does not hold within the timeout. The check may be async:
 * its promise is awaited (a pending promise is never mistaken for "true").
 */
type Falsy = undefined | null | false;

export async function waitFor<T>(check: () => T | Falsy | Promise<T | Falsy>, what: string, timeoutMs = 10_000): Promise<T> {
  const deadline = performance.now() + timeoutMs;
  for (;;) {
    const value = await check();
    if (value !== undefined && value !== null && value !== false) return value;
    if (performance.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
}

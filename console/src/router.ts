/** The console's client-side routing: the path and query as state, links that push history. */
import { useEffect, useState } from "preact/hooks";

const listeners = new Set<() => void>();

export function navigate(href: string): void {
  history.pushState(null, "", href);
  for (const l of listeners) l();
}

addEventListener("popstate", () => {
  for (const l of listeners) l();
});

/** The current location (path and query), re-rendered on navigation. */
export function useLocation(): { path: string; params: URLSearchParams } {
  const [, setTick] = useState(0);
  useEffect(() => {
    const l = () => setTick((n) => n + 1);
    listeners.add(l);
    return () => listeners.delete(l);
  }, []);
  return { path: location.pathname.replace(/\/+$/, "") || "/", params: new URLSearchParams(location.search) };
}

/** A click on an in-app link: navigate without reloading (modifier keys and new tabs keep the browser's way). */
export function follow(event: MouseEvent, href: string): void {
  if (event.defaultPrevented || event.button !== 0 || event.metaKey || event.ctrlKey || event.shiftKey || event.altKey) return;
  event.preventDefault();
  navigate(href);
}

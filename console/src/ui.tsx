/**
 * Shared pieces of the console's pages: loading data with its three states (loading, error with what to
 * do and a retry, loaded), empty states, links, the copy button and the confirmation dialog. Every text
 * is a JSX child or attribute (set as text, never parsed as HTML).
 */
import type { ComponentChildren } from "preact";
import { useCallback, useEffect, useRef, useState } from "preact/hooks";
import { ApiFailure } from "./api.ts";
import { follow } from "./router.ts";

export type Load<T> = { state: "loading" } | { state: "error"; message: string } | { state: "done"; data: T };

/** Runs `fetcher` now and whenever `key` changes; `reload` runs it again. */
export function useLoad<T>(fetcher: () => Promise<T>, key: string): [Load<T>, () => void] {
  const [load, setLoad] = useState<Load<T>>({ state: "loading" });
  const [tick, setTick] = useState(0);
  useEffect(() => {
    let live = true;
    setLoad({ state: "loading" });
    fetcher().then(
      (data) => live && setLoad({ state: "done", data }),
      (e: unknown) => live && setLoad({ state: "error", message: errorText(e) }),
    );
    return () => {
      live = false;
    };
  }, [key, tick]);
  return [load, useCallback(() => setTick((n) => n + 1), [])];
}

export function errorText(e: unknown): string {
  return e instanceof ApiFailure ? e.message : "Something went wrong in the page. Reload it and try again.";
}

export function Loading({ what }: { what: string }) {
  return (
    <p class="note" role="status">
      Loading {what}…
    </p>
  );
}

export function ErrorNote({ message, retry }: { message: string; retry?: () => void }) {
  return (
    <div class="error" role="alert">
      <p>{message}</p>
      {retry && (
        <button type="button" onClick={retry}>
          Try again
        </button>
      )}
    </div>
  );
}

export function Empty({ title, children }: { title: string; children: ComponentChildren }) {
  return (
    <div class="empty">
      <p>
        <strong>{title}</strong>
      </p>
      <p>{children}</p>
    </div>
  );
}

/** Renders `load`'s loading and error states, or `children(data)`. */
export function Loaded<T>({
  load,
  what,
  retry,
  children,
}: {
  load: Load<T>;
  what: string;
  retry: () => void;
  children: (data: T) => ComponentChildren;
}) {
  if (load.state === "loading") return <Loading what={what} />;
  if (load.state === "error") return <ErrorNote message={`Could not load ${what}: ${load.message}`} retry={retry} />;
  return <>{children(load.data)}</>;
}

export function Link({ href, children, current }: { href: string; children: ComponentChildren; current?: boolean }) {
  return (
    <a href={href} aria-current={current ? "page" : undefined} onClick={(e) => follow(e, href)}>
      {children}
    </a>
  );
}

export function CopyButton({ text, label }: { text: string; label: string }) {
  const [done, setDone] = useState<"" | "copied" | "failed">("");
  const copy = async () => {
    try {
      await navigator.clipboard.writeText(text);
      setDone("copied");
    } catch {
      setDone("failed");
    }
  };
  return (
    <>
      <button type="button" onClick={copy}>
        {label}
      </button>
      <span role="status" class="note">
        {done === "copied" ? " Copied." : done === "failed" ? " Copying failed: select the text and copy it yourself." : ""}
      </span>
    </>
  );
}

/** A modal confirmation (<dialog>): focus moves into it, Escape cancels. */
export function Confirm(props: {
  title: string;
  children: ComponentChildren;
  action: string;
  onConfirm: () => Promise<void>;
  onClose: () => void;
}) {
  const ref = useRef<HTMLDialogElement>(null);
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState("");
  useEffect(() => {
    ref.current?.showModal();
  }, []);
  const confirm = async () => {
    setBusy(true);
    setError("");
    try {
      await props.onConfirm();
      props.onClose();
    } catch (e) {
      setError(errorText(e));
      setBusy(false);
    }
  };
  return (
    <dialog ref={ref} aria-labelledby="confirm-title" onClose={props.onClose}>
      <h2 id="confirm-title">{props.title}</h2>
      {props.children}
      {error !== "" && <ErrorNote message={error} />}
      <div class="actions">
        <button type="button" class="secondary" onClick={() => ref.current?.close()}>
          Cancel
        </button>
        <button type="button" class="danger" disabled={busy} onClick={confirm}>
          {busy ? "Working…" : props.action}
        </button>
      </div>
    </dialog>
  );
}

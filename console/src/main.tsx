/**
 * The console app: reads the session (GET /console/api/session); without one (401) the sign-in page,
 * otherwise the layout (skip link, header with the account and sign-out, navigation) around the page
 * the path names. On a page change the page's heading takes focus and the title follows.
 */
import { render } from "preact";
import { useEffect, useRef, useState } from "preact/hooks";
import "./styles.css";
import { ApiFailure, api, onUnauthorized, type Session, useCsrf } from "./api.ts";
import { DevicePage } from "./pages/device.tsx";
import { KeysPage } from "./pages/keys.tsx";
import { MachinesPage } from "./pages/machines.tsx";
import { OverviewPage } from "./pages/overview.tsx";
import { ReferencePage } from "./pages/reference.tsx";
import { SignInPage } from "./pages/sign-in.tsx";
import { UsagePage } from "./pages/usage.tsx";
import { navigate, useLocation } from "./router.ts";
import { ErrorNote, errorText, Link, Loading } from "./ui.tsx";

const PAGES = [
  { path: "/console", title: "Overview", page: OverviewPage },
  { path: "/console/keys", title: "API keys", page: KeysPage },
  { path: "/console/usage", title: "Usage", page: UsagePage },
  { path: "/console/machines", title: "Machines", page: MachinesPage },
  { path: "/console/device", title: "Approve a device", page: DevicePage },
  { path: "/console/reference", title: "API reference", page: ReferencePage },
];

function NotFound() {
  return (
    <p>
      There is no such page in the console. Go to the <Link href="/console/">overview</Link>.
    </p>
  );
}

function Layout({ session, onSignedOut }: { session: Session; onSignedOut: () => void }) {
  const { path } = useLocation();
  const current = PAGES.find((p) => p.path === path);
  const title = current?.title ?? "Page not found";
  const heading = useRef<HTMLHeadingElement>(null);
  const first = useRef(true);
  const [error, setError] = useState("");
  useEffect(() => {
    document.title = `${title} · Umbra console`;
    if (!first.current) heading.current?.focus();
    first.current = false;
  }, [path, title]);
  const signOut = async (everywhere: boolean) => {
    try {
      await api(everywhere ? "/console/api/sign-out-everywhere" : "/console/api/sign-out", { method: "POST" });
      onSignedOut();
    } catch (e) {
      setError(errorText(e));
    }
  };
  const Page = current?.page ?? NotFound;
  return (
    <>
      <a class="skip" href="#main">
        Skip to content
      </a>
      <header>
        <p class="brand">Umbra console</p>
        <p class="account">
          Signed in as <strong>{session.account.name}</strong>
        </p>
        <button type="button" onClick={() => signOut(false)}>
          Sign out
        </button>
        <button type="button" onClick={() => signOut(true)}>
          Sign out everywhere
        </button>
      </header>
      <nav aria-label="Console">
        <ul>
          {PAGES.map((p) => (
            <li key={p.path}>
              <Link href={p.path === "/console" ? "/console/" : p.path} current={p.path === path}>
                {p.title}
              </Link>
            </li>
          ))}
        </ul>
      </nav>
      <main id="main" tabIndex={-1}>
        <h1 ref={heading} tabIndex={-1}>
          {title}
        </h1>
        {error !== "" && <ErrorNote message={error} />}
        <Page key={path} />
      </main>
    </>
  );
}

type Status =
  | { state: "loading" }
  | { state: "signed-out"; expired: boolean }
  | { state: "error"; message: string }
  | { state: "in"; session: Session };

function App() {
  const [status, setStatus] = useState<Status>({ state: "loading" });
  const load = () => {
    setStatus({ state: "loading" });
    api<Session>("/console/api/session").then(
      (session) => {
        useCsrf(session.csrf_token);
        setStatus({ state: "in", session });
      },
      (e: unknown) =>
        setStatus(
          e instanceof ApiFailure && e.status === 401 ? { state: "signed-out", expired: false } : { state: "error", message: errorText(e) },
        ),
    );
  };
  useEffect(() => {
    onUnauthorized(() => setStatus({ state: "signed-out", expired: true }));
    load();
  }, []);
  useEffect(() => {
    if (status.state === "signed-out") document.title = "Sign in · Umbra console";
  }, [status.state]);
  if (status.state === "loading")
    return (
      <main id="main">
        <Loading what="the console" />
      </main>
    );
  if (status.state === "error")
    return (
      <main id="main">
        <h1>Umbra console</h1>
        <ErrorNote message={`Could not reach your session: ${status.message}`} retry={load} />
      </main>
    );
  if (status.state === "signed-out") return <SignInPage expired={status.expired} />;
  return (
    <Layout
      session={status.session}
      onSignedOut={() => {
        navigate("/console/");
        setStatus({ state: "signed-out", expired: false });
      }}
    />
  );
}

const root = document.getElementById("app");
if (root !== null) {
  root.textContent = "";
  render(<App />, root);
}

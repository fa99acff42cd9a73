/**
 * One disposable chat test environment for the e2e tests: a test app with the seeded catalog
 * (harness.ts), a credited account with an API key, a provider device token, the app on a real socket
 * (server.ts) and providers connected on demand: fake ones, or real provider processes. Disposal
 * stops them, then the server and the app:
 *
 *   await using ctx = await chatEnv({ env: { UMBRA_MAX_ATTEMPTS: "2" } });
 *   const p = await ctx.provider({ behave: () => [{ do: "hang" }] });
 *   await postChat(ctx.server.url, ctx.apiKey, chatBody("hi"));
 */
import type { ListenOptions } from "../../src/coordinator/server.ts";
import { type Behaviour, connectFakeProvider, echo, type FakeProvider } from "./fake-provider.ts";
import { seedAccount, seedCatalog, type TestApp, type TestAppOptions, testApp } from "./harness.ts";
import { type ProviderProcess, startProvider } from "./processes.ts";
import { providerToken, startServer, type TestServer } from "./server.ts";

/** The seeded catalog's build (the alias `org/model` names it). */
export const SEEDED_BUILD = "org/base-build-4bit";

export interface ChatEnvOptions extends TestAppOptions {
  /** How the server listens (a short idle timeout). */
  readonly listen?: ListenOptions;
  /** The seeded account's key settings (seedAccount) and credit. */
  readonly key?: Record<string, unknown>;
  readonly credit?: number;
}

export interface ProviderOptions {
  /** What it answers (default: echo). */
  readonly behave?: Behaviour;
  /** The builds it serves (default: the seeded build). */
  readonly models?: readonly string[];
  readonly maxConcurrency?: number;
  /** Speak the sealed protocol; with `sessionKeys`, offer session keys too. */
  readonly sealed?: boolean;
  readonly sessionKeys?: boolean;
  /** Send heartbeats (default true). */
  readonly heartbeat?: boolean;
  /** Fields merged into its hello. */
  readonly hello?: Record<string, unknown>;
  /** Another device token (default: the seeded account's). */
  readonly token?: string;
}

export interface ChatEnv extends AsyncDisposable {
  readonly t: TestApp;
  readonly server: TestServer;
  readonly accountId: string;
  readonly apiKey: string;
  readonly keyId: string;
  /** A device token of the same account. */
  readonly token: string;
  /** Connects a fake provider, disposed with the environment. */
  provider(options?: ProviderOptions): Promise<FakeProvider>;
  /** Disconnects every provider connected so far. */
  disconnectAll(): Promise<void>;
  /**
   * Starts a real `umbra-provider start --engine echo --model <seeded build>` process with the account's
   * token and `args` after those, waits until it is welcomed; stopped with the environment.
   */
  providerProcess(args?: readonly string[]): Promise<ProviderProcess>;
}

export async function chatEnv(options: ChatEnvOptions = {}): Promise<ChatEnv> {
  const { listen, key, credit, ...appOptions } = options;
  const t = await testApp(appOptions);
  try {
    await seedCatalog(t);
    const account = await seedAccount(t, key, credit);
    const token = await providerToken(t, account.accountId);
    const server = startServer(t, listen);
    const providers: FakeProvider[] = [];
    const processes: ProviderProcess[] = [];
    const close = async (order: FakeProvider[]) => {
      for (const p of order) await p[Symbol.asyncDispose]();
    };
    return {
      t,
      server,
      ...account,
      token,
      async provider(o: ProviderOptions = {}) {
        const p = await connectFakeProvider({
          url: server.url,
          token: o.token ?? token,
          models: o.models ?? [SEEDED_BUILD],
          behave: o.behave ?? echo,
          ...(o.maxConcurrency !== undefined ? { maxConcurrency: o.maxConcurrency } : {}),
          ...(o.sealed !== undefined ? { sealed: o.sealed } : {}),
          ...(o.sessionKeys !== undefined ? { sessionKeys: o.sessionKeys } : {}),
          ...(o.heartbeat !== undefined ? { heartbeat: o.heartbeat } : {}),
          ...(o.hello !== undefined ? { hello: o.hello } : {}),
        });
        providers.push(p);
        return p;
      },
      disconnectAll: () => close(providers.splice(0)),
      async providerProcess(args: readonly string[] = []) {
        const p = startProvider(["--coordinator", server.url, "--token", token, "--engine", "echo", "--model", SEEDED_BUILD, ...args]);
        processes.push(p);
        await p.connected;
        return p;
      },
      async [Symbol.asyncDispose]() {
        try {
          for (const p of processes.splice(0)) await p[Symbol.asyncDispose]();
          await close(providers.splice(0).reverse());
          await server[Symbol.asyncDispose]();
        } finally {
          await t[Symbol.asyncDispose]();
        }
      },
    };
  } catch (e) {
    await t[Symbol.asyncDispose]();
    throw e;
  }
}

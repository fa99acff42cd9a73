/**
 * A provider without crypto, for measuring the coordinator's own costs (the money path) without HPKE
 * and sealed chunks dominating: the test suite's protocol-v2 fake provider with its echo behaviour,
 * plaintext frames (development coordinators accept them; production refuses them). Prints one JSON
 * line once connected and serves until killed.
 *
 * Usage: bun bench/plain-provider.ts <coordinator url> <provider token> <model>
 */
import { connectFakeProvider } from "../test/support/fake-provider.ts";

const [url, token, model] = process.argv.slice(2);
if (!url || !token || !model) throw new Error("usage: plain-provider.ts <url> <token> <model>");
const provider = await connectFakeProvider({ url, token, models: [model], maxConcurrency: 1024 });
console.log(JSON.stringify({ connected: provider.providerId }));
await provider.closed;

/** The official openai npm client against a real server socket: listing and retrieving org/model ids. */
import { describe, expect, test } from "bun:test";
import OpenAI from "openai";
import { listen } from "../../src/coordinator/server.ts";
import { seedAccount, seedCatalog, testApp } from "../support/harness.ts";

describe("openai client", () => {
  test("lists, retrieves org/model ids (alias and hidden build) and reports errors", async () => {
    await using t = await testApp();
    await seedCatalog(t);
    const { apiKey } = await seedAccount(t);
    const server = listen(t.app, "127.0.0.1", 0);
    try {
      const client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey, maxRetries: 0 });

      const ids: string[] = [];
      for await (const m of client.models.list()) ids.push(m.id);
      expect(ids).toEqual(["org/model", "other/plain"]);

      const alias = await client.models.retrieve("org/model");
      expect([alias.id, alias.object, alias.owned_by]).toEqual(["org/model", "model", "org"]);

      const hidden = await client.models.retrieve("org/base-build-4bit");
      expect(hidden.id).toBe("org/base-build-4bit");

      const missing = await (async () => {
        try {
          await client.models.retrieve("org/none");
          return undefined;
        } catch (e) {
          return e;
        }
      })();
      expect(missing).toBeInstanceOf(OpenAI.NotFoundError);
      expect((missing as InstanceType<typeof OpenAI.NotFoundError>).code).toBe("model_not_found");

      const bad = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: "sk-umbra-wrong", maxRetries: 0 });
      await expect((async () => await bad.models.retrieve("org/model"))()).rejects.toBeInstanceOf(OpenAI.AuthenticationError);
    } finally {
      await server.stop();
    }
  });
});

/**
 * A fake NanoMDM on a real socket (port 0) and simulated Macs behind it, modelled on micromdm/nanomdm's
 * `http/api` (Basic `nanomdm:<key>`, 401 otherwise; JSON answers tab-indented as its writeJSON does),
 * `api/types.go` (APIResult), `storage/pgsql/queue.go` (an enqueue to an id without an enrolment row is a
 * foreign-key error: 500 `command_error`) and `service/webhook` (events in `event.json`'s shape, fields in
 * its Go struct order, `X-Hmac-Signature` = base64 HMAC-SHA256 of the body; one POST, no retry).
 * - `enrol(mac, token)` sends the Authenticate check-in (`url_params.e` = the token); `tokenUpdate(mac)`
 *   then creates the enrolment row (before it, enqueues fail: the race right after profile install).
 * - PUT /v1/enqueue/{id} queues FIFO and pushes; GET /v1/push/{id} pushes: an awake Mac then drains its
 *   queue, one command report webhook (mdm.Connect) per command, then Idle. An asleep Mac waits for `wake`.
 * - `webhookMode` drops, duplicates or holds (late) command reports; `refuseEnqueue` forces 500s.
 */
import { createHmac } from "node:crypto";
import { build, type PlistValue, parse } from "plist";
import type { SimulatedMac } from "./simulated-mac.ts";

interface Queued {
  readonly commandUuid: string;
  readonly raw: string;
}

interface Enrolment {
  readonly mac: SimulatedMac;
  readonly token: string;
  /** NanoMDM has the enrolment row (after TokenUpdate): commands may be queued. */
  row: boolean;
  readonly queue: Queued[];
}

export type WebhookMode = "send" | "drop" | "twice" | "hold";

export interface FakeNanoMdmOptions {
  readonly apiKey: string;
  /** Where webhooks go (a function: a coordinator started after this fake, whose URL comes later). */
  readonly webhookUrl: string | (() => string);
  readonly webhookKey: string;
  /** Time the API takes to answer (so that concurrent calls overlap). */
  readonly latencyMs?: number;
}

const json = (body: unknown, status = 200) =>
  new Response(`${JSON.stringify(body, null, "\t")}\n`, { status, headers: { "content-type": "application/json" } });

export class FakeNanoMdm implements AsyncDisposable {
  readonly enqueues: { id: string; commandUuid: string; at: number }[] = [];
  readonly pushes: string[] = [];
  /** Command report webhooks sent, and what the coordinator answered. */
  readonly delivered: { topic: string; status: number; body: unknown }[] = [];
  readonly held: (() => Promise<void>)[] = [];
  inFlight = 0;
  maxInFlight = 0;
  webhookMode: (commandUuid: string) => WebhookMode = () => "send";
  refuseEnqueue: (id: string) => boolean = () => false;
  private readonly enrolments = new Map<string, Enrolment>();
  private server: ReturnType<typeof Bun.serve> | undefined;
  private readonly busy = new Set<Promise<unknown>>();

  constructor(private readonly options: FakeNanoMdmOptions) {}

  get url(): string {
    if (!this.server) throw new Error("not started");
    return `http://127.0.0.1:${this.server.port}`;
  }

  start(): this {
    this.server = Bun.serve({ hostname: "127.0.0.1", port: 0, fetch: (request) => this.api(request) });
    return this;
  }

  queueOf(mac: SimulatedMac): readonly Queued[] {
    return this.enrolments.get(mac.nanomdmId)?.queue ?? [];
  }

  /** The Authenticate check-in of a Mac that installed the profile carrying `token`. */
  async enrol(mac: SimulatedMac, token: string): Promise<unknown> {
    this.enrolments.set(mac.nanomdmId, { mac, token, row: false, queue: [] });
    return this.checkIn("mdm.Authenticate", mac, token, {
      MessageType: "Authenticate",
      SerialNumber: mac.serial,
      UDID: mac.nanomdmId,
      Topic: "com.apple.mgmt.External.e0bd1eac-1f17-4c8e-8a63-dd17d3dd35d9",
      BuildVersion: "24F74",
      OSVersion: mac.osVersion,
      ProductName: "Mac14,2",
    });
  }

  /** The TokenUpdate check-in: NanoMDM now has the enrolment row. */
  async tokenUpdate(mac: SimulatedMac): Promise<unknown> {
    const e = this.must(mac);
    e.row = true;
    return this.checkIn("mdm.TokenUpdate", mac, e.token, {
      MessageType: "TokenUpdate",
      UDID: mac.nanomdmId,
      Topic: "com.apple.mgmt.External.e0bd1eac-1f17-4c8e-8a63-dd17d3dd35d9",
      PushMagic: "00000000-1111-2222-3333-444455556666",
      Token: new Uint8Array(32),
    });
  }

  /** The CheckOut check-in (profile removed). */
  async checkOut(mac: SimulatedMac): Promise<unknown> {
    const e = this.must(mac);
    this.enrolments.delete(mac.nanomdmId);
    return this.checkIn("mdm.CheckOut", mac, e.token, { MessageType: "CheckOut", UDID: mac.nanomdmId });
  }

  /** The Mac wakes (or a push reaches it): it drains its queue. */
  async connect(mac: SimulatedMac): Promise<void> {
    const e = this.must(mac);
    while (e.queue.length > 0) {
      const next = e.queue[0] as Queued;
      const answer = await mac.answer(parse(next.raw) as { [key: string]: PlistValue });
      if (answer.Status !== "NotNow") e.queue.shift();
      await this.report(mac, e.token, next.commandUuid, answer);
      if (answer.Status === "NotNow") return;
    }
    await this.report(mac, e.token, undefined, { Status: "Idle", UDID: mac.nanomdmId });
  }

  /** Sends the held (late) command reports now. */
  async releaseHeld(): Promise<void> {
    for (const send of this.held.splice(0)) await send();
  }

  /** Every Mac connection started by a push has finished. */
  async idle(): Promise<void> {
    while (this.busy.size > 0) await Promise.all([...this.busy]);
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.idle();
    await this.server?.stop(true);
  }

  private must(mac: SimulatedMac): Enrolment {
    const e = this.enrolments.get(mac.nanomdmId);
    if (!e) throw new Error(`${mac.nanomdmId} is not enrolled in the fake NanoMDM`);
    return e;
  }

  private async api(request: Request): Promise<Response> {
    const expected = `Basic ${Buffer.from(`nanomdm:${this.options.apiKey}`).toString("base64")}`;
    if (request.headers.get("authorization") !== expected) {
      return new Response("Unauthorized\n", { status: 401, headers: { "www-authenticate": 'Basic realm="nanomdm"' } });
    }
    this.inFlight++;
    this.maxInFlight = Math.max(this.maxInFlight, this.inFlight);
    try {
      if (this.options.latencyMs) await new Promise((resolve) => setTimeout(resolve, this.options.latencyMs));
      const url = new URL(request.url);
      if (request.method === "PUT" && url.pathname.startsWith("/v1/enqueue/")) {
        return this.enqueue(decodeURIComponent(url.pathname.slice(12)), await request.text(), url.searchParams.get("nopush") !== null);
      }
      if (request.method === "GET" && url.pathname.startsWith("/v1/push/")) return this.push(decodeURIComponent(url.pathname.slice(9)));
      return new Response("404 page not found\n", { status: 404 });
    } finally {
      this.inFlight--;
    }
  }

  private enqueue(id: string, raw: string, noPush: boolean): Response {
    const command = parse(raw) as { CommandUUID?: string; Command?: { RequestType?: string } };
    const meta = { command_uuid: command.CommandUUID, request_type: command.Command?.RequestType };
    const e = this.enrolments.get(id);
    if (!e?.row || this.refuseEnqueue(id)) {
      const error = `pq: insert or update on table "enrollment_queue" violates foreign key constraint "enrollment_queue_id_fkey"`;
      return json({ command_error: error, ...meta }, 500);
    }
    e.queue.push({ commandUuid: command.CommandUUID ?? "", raw });
    this.enqueues.push({ id, commandUuid: command.CommandUUID ?? "", at: performance.now() });
    if (noPush) return json({ no_push: true, ...meta });
    return json({ status: { [id]: { push_result: this.sendPush(e) } }, ...meta });
  }

  private push(id: string): Response {
    const e = this.enrolments.get(id);
    if (!e?.row) return json({ push_error: `retrieving push info: push data missing for id: ${id}` }, 500);
    return json({ status: { [id]: { push_result: this.sendPush(e) } } });
  }

  /** Records the push; an awake Mac connects (asynchronously, as APNs delivers). */
  private sendPush(e: Enrolment): string {
    this.pushes.push(e.mac.nanomdmId);
    if (e.mac.awake) {
      const run = Promise.resolve()
        .then(() => this.connect(e.mac))
        .finally(() => this.busy.delete(run));
      this.busy.add(run);
    }
    return crypto.randomUUID().toUpperCase();
  }

  private async checkIn(topic: string, mac: SimulatedMac, token: string, message: { [key: string]: PlistValue }): Promise<unknown> {
    const event = {
      checkin_event: {
        ids: { id: mac.nanomdmId, type: "Device" },
        raw_payload: Buffer.from(build(message)).toString("base64"),
        udid: mac.nanomdmId,
        url_params: { e: token },
      },
      created_at: new Date().toISOString(),
      event_id: crypto.randomUUID(),
      topic,
    };
    return (await this.post(topic, event)).body;
  }

  /** NanoMDM's enrolment row for a Mac bound elsewhere (no check-in webhooks: many Macs at once). */
  register(mac: SimulatedMac, token: string): void {
    this.enrolments.set(mac.nanomdmId, { mac, token, row: true, queue: [] });
  }

  /** A command report event as NanoMDM builds it (service/webhook CommandAndReportResults). */
  reportEvent(mac: SimulatedMac, token: string, commandUuid: string | undefined, answer: { [key: string]: PlistValue }) {
    return {
      acknowledge_event: {
        ...(commandUuid !== undefined ? { command_uuid: commandUuid } : {}),
        ids: { id: mac.nanomdmId, type: "Device" },
        raw_payload: Buffer.from(build(answer)).toString("base64"),
        status: answer.Status,
        udid: mac.nanomdmId,
        url_params: { e: token },
      },
      created_at: new Date().toISOString(),
      event_id: crypto.randomUUID(),
      topic: "mdm.Connect",
    };
  }

  private async report(mac: SimulatedMac, token: string, commandUuid: string | undefined, answer: { [key: string]: PlistValue }) {
    const event = this.reportEvent(mac, token, commandUuid, answer);
    const mode = commandUuid === undefined ? "send" : this.webhookMode(commandUuid);
    if (mode === "drop") return;
    if (mode === "hold") {
      this.held.push(async () => void (await this.post("mdm.Connect", event)));
      return;
    }
    await this.post("mdm.Connect", event);
    if (mode === "twice") await this.post("mdm.Connect", event);
  }

  /** One POST, as NanoMDM sends it. */
  async post(topic: string, event: unknown, signature?: string): Promise<{ status: number; body: unknown }> {
    const body = JSON.stringify(event);
    const hmac = signature ?? createHmac("sha256", this.options.webhookKey).update(body).digest("base64");
    const url = this.options.webhookUrl;
    const response = await fetch(typeof url === "string" ? url : url(), {
      method: "POST",
      headers: { "content-type": "application/json; charset=utf-8", "x-hmac-signature": hmac },
      body,
    });
    const answer: unknown = await response.json().catch(() => undefined);
    this.delivered.push({ topic, status: response.status, body: answer });
    return { status: response.status, body: answer };
  }
}

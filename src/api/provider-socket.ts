/**
 * GET /v1/provider/connect: the provider WebSocket. The bearer must be a live provider device token
 * (unrevoked, unexpired); otherwise the upgrade is refused with 401 and the error envelope. A token already at its session
 * limit (or a fleet with too many connections awaiting welcome) is refused with 429
 * rate_limit_exceeded and Retry-After before the upgrade; a connection that slips past that check
 * concurrently is closed with 4029 when it opens (the fleet counts at open). Frames go to the fleet's
 * session, which validates each one; frames over MAX_FRAME_BYTES close the socket (1009) before parsing.
 * The token's expiry goes with the session: the fleet ends it then.
 */
import type { Server, ServerWebSocket, WebSocketHandler } from "bun";
import { ApiError, Errors } from "../errors/api-error.ts";
import type { Fleet } from "../fleet/fleet.ts";
import type { ProviderSession, SessionIdentity } from "../fleet/session.ts";
import type { Logger } from "../observability/logger.ts";
import { MAX_FRAME_BYTES } from "../protocol/frames.ts";
import type { ProviderTokenRecord } from "../store/types.ts";
import { errorResponse } from "./errors.ts";

export const PROVIDER_CONNECT_PATH = "/v1/provider/connect";
/** Retry-After of a connection refused for the session limit: sessions are long-lived. */
const SESSION_LIMIT_RETRY_SECONDS = 30;

export interface SocketData {
  readonly identity: SessionIdentity;
  session?: ProviderSession;
}

export interface ProviderSocket {
  /** Authenticates and upgrades; returns a Response only when the upgrade is refused. */
  upgrade(request: Request, server: Server<SocketData>): Promise<Response | undefined>;
  readonly websocket: WebSocketHandler<SocketData>;
}

export interface ProviderSocketDeps {
  /** The device-token check (src/auth/authenticator.ts: authenticateProvider on the app's clock). */
  readonly authenticate: (authorization: string | null) => Promise<ProviderTokenRecord>;
  readonly fleet: Fleet;
  readonly logger: Logger;
}

export function providerSocket(deps: ProviderSocketDeps): ProviderSocket {
  return {
    async upgrade(request, server) {
      let record: ProviderTokenRecord;
      try {
        record = await deps.authenticate(request.headers.get("authorization"));
      } catch (e) {
        if (e instanceof ApiError) return errorResponse(e);
        throw e;
      }
      const refused = deps.fleet.refusal(record.id);
      if (refused !== undefined) {
        deps.logger.debug("provider connection refused", { account_id: record.accountId, reason: refused });
        return errorResponse(Errors.rateLimited(refused, SESSION_LIMIT_RETRY_SECONDS));
      }
      const data: SocketData = { identity: { accountId: record.accountId, tokenId: record.id, tokenExpiresAt: record.expiresAt } };
      if (server.upgrade(request, { data })) return undefined;
      return errorResponse(Errors.invalidValue("a WebSocket upgrade is required"));
    },
    websocket: {
      maxPayloadLength: MAX_FRAME_BYTES,
      idleTimeout: 120,
      open(ws: ServerWebSocket<SocketData>) {
        ws.data.session = deps.fleet.connect(
          { send: (text) => void ws.send(text), close: (code, reason) => ws.close(code, reason) },
          ws.data.identity,
        );
      },
      message(ws: ServerWebSocket<SocketData>, message: string | Buffer) {
        ws.data.session?.onFrame(message);
      },
      close(ws: ServerWebSocket<SocketData>, code: number) {
        const session = ws.data.session;
        if (session && !session.closed) {
          deps.logger.info("provider disconnected", { provider_id: session.id, status: code });
          session.onTransportClosed();
        }
      },
    },
  };
}

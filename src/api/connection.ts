/**
 * What the server (coordinator/server.ts) knows of a request's connection and hands to the HTTP app:
 * the peer's address and the chat route's idle-timeout hooks. Nothing in-process.
 */
export interface Connection {
  /** The peer's address, asked for only by the routes that use it (the device login's limits). */
  readonly address: () => string | undefined;
  /**
   * Called once the chat route has its whole request body: the server lifts the idle timeout for the
   * answer then, not while the body may still stall.
   */
  readonly bodyRead?: () => void;
  /**
   * Called once that answer has ended (a JSON or error body built, or a stream's outcome settled): the
   * server restores the idle timeout, so a consumer that stops reading, or keeps the connection idle
   * afterwards, is disconnected like any other. May be called more than once.
   */
  readonly answered?: () => void;
}

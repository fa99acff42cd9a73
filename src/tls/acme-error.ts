/**
 * AcmeError: an ACME order or its HTTP-01 responder failed; the message names the step and the CA's answer.
 * Its own module so the CLI can map it (exit 1) without loading acme-client, which only `--tls acme` needs.
 */
export class AcmeError extends Error {
  override readonly name = "AcmeError";
}

/**
 * Loads `reflect-metadata` before @peculiar/x509 (its dependency injection reads decorator metadata at
 * import time). Bun does not keep import order reliably (STACK.md item 1), so this module is preloaded
 * by bunfig.toml for tests, imported first by `attestation/provider/index.ts` for compiled binaries, and
 * imported statically by every module that loads @peculiar/x509 lazily, so that it is in place before
 * that graph whatever runs them (test/unit/attestation-provider/lazy-x509.test.ts).
 */
import "reflect-metadata";

/**
 * Loads `reflect-metadata` before @peculiar/x509 (its dependency injection reads decorator metadata at
 * import time). Bun does not keep import order reliably (STACK.md item 1), so this module is preloaded
 * by bunfig.toml for tests and imported first by `attestation/provider/index.ts` for compiled binaries.
 */
import "reflect-metadata";

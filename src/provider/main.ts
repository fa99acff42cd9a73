#!/usr/bin/env bun
/**
 * The entry point. reflect-metadata must be loaded before @peculiar/x509 (attestation/), and Bun does not
 * keep static import order reliably (STACK.md item 1; seen here as a rare start-up crash under load), so
 * the preload is awaited on its own before the command line module, and everything it imports, loads.
 */
await import("../../attestation/provider/preload.ts");
await import("./cli.ts");

export {};

/** The store's errors, thrown by every implementation (the conformance suite checks them). */
/** A uniqueness constraint refused the write; `field` names the input that collided. */
export class DuplicateError extends Error {
  override readonly name = "DuplicateError";
  constructor(readonly field: string) {
    super(`${field} is already in use`);
  }
}

/** The store cannot be opened, migrated or written. The message names the path, never data. */
export class StoreOpenError extends Error {
  override readonly name = "StoreOpenError";
}

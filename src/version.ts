/** The product version, shown by `--version` and logged at start. */
export const VERSION = "0.1.0";

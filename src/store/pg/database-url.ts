/**
 * A Postgres URL as logs and messages may show it: without its password (`describeDatabase`), and a
 * driver's message with the password removed (`withoutSecret`). Apart from the driver (pg/open.ts), so
 * the store opener names a database without loading postgres.js into a coordinator on SQLite.
 */

/** The URL without its password, for logs and messages. */
export function describeDatabase(url: string): string {
  try {
    const u = new URL(url);
    u.password = "";
    return u.toString();
  } catch {
    return "postgres database (unparsable URL)";
  }
}

/** `message` with the URL's password (raw and decoded) replaced. */
export function withoutSecret(url: string, message: string): string {
  let password = "";
  try {
    password = new URL(url).password;
  } catch {
    return message.replaceAll(url, "<database URL>");
  }
  let out = message.replaceAll(url, describeDatabase(url));
  for (const p of new Set([password, safeDecode(password)])) if (p.length > 0) out = out.replaceAll(p, "***");
  return out;
}

function safeDecode(s: string): string {
  try {
    return decodeURIComponent(s);
  } catch {
    return s;
  }
}

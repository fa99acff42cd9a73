// Text imports (`with { type: "text" }`) of committed assets such as migration SQL.
declare module "*.sql" {
  const text: string;
  export default text;
}

// The console's generated asset table (console/build.ts writes it; src/console/assets.ts imports it).
declare module "*/console/dist/assets.js" {
  const table: { readonly script: string; readonly style: string; readonly files: Readonly<Record<string, string>> };
  export default table;
}

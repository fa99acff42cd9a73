// Text imports (`with { type: "text" }`) of committed assets such as migration SQL.
declare module "*.sql" {
  const text: string;
  export default text;
}

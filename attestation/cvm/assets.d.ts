// Text imports (`with { type: "text" }`) of the pinned AMD root certificates in roots/.
declare module "*.pem" {
  const text: string;
  export default text;
}

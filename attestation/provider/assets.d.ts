// Text imports (`with { type: "text" }`) of the pinned root certificates in attestation/roots/.
declare module "*.pem" {
  const text: string;
  export default text;
}

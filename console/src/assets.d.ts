// Style sheets imported for their side effect: Bun.build bundles them into the console's one CSS file.
declare module "*.css";

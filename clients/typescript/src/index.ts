// Forge's TypeScript client: the wire types, the reducer that folds stream items into a view of
// a thread's runs, reconnecting live subscriptions, and the GraphQL calls every client makes.

export * from "./generated/wire";
export type * as Api from "./generated/graphql";
export * from "./reducer";
export * from "./live";
export * from "./client";
export * from "./diff";

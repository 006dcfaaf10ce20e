// The web client's live subscriptions: the client package's, connected to the server that
// served the page with the tab's token.

import { type Connection, type Handlers, type Pending, followPending as pending, followThread } from "@forge/client";

import { token } from "./api";

export type { Pending } from "@forge/client";

/** Test hooks (the browser tests read and kill the socket through them). */
declare global {
  interface Window {
    __forge?: { sockets: number; terminate(): void };
  }
}

/** The page's server, with the tab's token. */
function connection(): Connection {
  return {
    url: `${location.protocol === "https:" ? "wss" : "ws"}://${location.host}/graphql`,
    token,
    onClient: (c) => {
      window.__forge = { sockets: (window.__forge?.sockets ?? 0) + 1, terminate: () => c.terminate() };
    },
  };
}

/** Follows `threadId` until `stop()`. */
export function follow(threadId: string, h: Handlers): { stop(): void } {
  return followThread(connection(), threadId, h);
}

/** Follows the caller's pending approvals and questions until `stop()`. */
export function followPending(
  list: (items: Pending[]) => void,
  status: Handlers["status"],
  signInRequired: () => void,
): { stop(): void } {
  return pending(connection(), list, status, signInRequired);
}

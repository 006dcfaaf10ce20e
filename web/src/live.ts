// Following a thread live over `graphql-transport-ws`, without gaps across reconnects.
//
// The subscription carries each run's last committed sequence number (`after`), so a new
// subscription — after a dropped socket, a server restart, a gap the reducer saw — receives
// exactly the committed events it is missing; provisional ones are dropped first
// (`resubscribed`). Reconnects back off exponentially, with jitter. A refused token (close
// code 4403, or an error saying so) stops following and asks the user to sign in again; the
// view is kept, and following resumes from its cursors afterwards.

import { createClient, type Client } from "graphql-ws";

import type { StreamItem } from "./generated/wire";
import { token } from "./api";

const THREAD_EVENTS = `subscription Follow($threadId: ID!, $after: [RunCursor!]!) {
  threadEvents(threadId: $threadId, after: $after) { item }
}`;

/** The delay before reconnect number `attempt` (from 0): exponential, capped, the upper half random. */
export function backoff(attempt: number, random: () => number = Math.random): number {
  const ceiling = Math.min(10_000, 250 * 2 ** Math.min(attempt, 10));
  return Math.round(ceiling / 2 + random() * (ceiling / 2));
}

/** What the follower reports. */
export interface Handlers {
  /** A new subscription began: drop provisional events. */
  resubscribed(): void;
  /** An item arrived. */
  item(item: StreamItem): void;
  /** The cursors to subscribe with, each run's last committed seq. */
  cursors(): { runId: string; seq: number }[];
  /** Whether the view saw a gap (resubscribe now). */
  gap(): boolean;
  /** Connection state, for the page. */
  status(s: "connecting" | "live" | "reconnecting" | "signed-out"): void;
  /** The token was refused. */
  signInRequired(): void;
}

/** Test hooks (the browser tests read and kill the socket through them). */
declare global {
  interface Window {
    __forge?: { sockets: number; terminate(): void };
  }
}

/** How one kept-up subscription is asked and what it reports. */
interface Kept<T> {
  query: string;
  /** The variables of each new subscription (read again on every reconnect). */
  variables(): Record<string, unknown>;
  /** A new subscription begins. */
  starting(): void;
  /** One result; `true` asks to start again (a gap). */
  data(value: T): boolean | void;
  status(s: "connecting" | "live" | "reconnecting" | "signed-out"): void;
  signInRequired(): void;
}

/** Keeps a subscription up until `stop()`: reconnecting with backoff, stopping on refusal. */
function keep<T>(k: Kept<T>): { stop(): void } {
  let stopped = false;
  let attempt = 0;
  let client: Client | null = null;
  let timer: ReturnType<typeof setTimeout> | null = null;
  let unsubscribe: (() => void) | null = null;

  const url = `${location.protocol === "https:" ? "wss" : "ws"}://${location.host}/graphql`;

  const retry = () => {
    if (stopped) return;
    k.status("reconnecting");
    timer = setTimeout(start, backoff(attempt++));
  };

  const refusedNow = () => {
    k.status("signed-out");
    k.signInRequired();
  };

  const start = () => {
    if (stopped) return;
    const t = token();
    if (!t) return refusedNow();
    client?.dispose();
    let refused = false;
    const c = createClient({
      url,
      lazy: true,
      retryAttempts: 0,
      connectionParams: { authorization: `Bearer ${t}` },
      on: {
        connected: () => {
          attempt = 0;
          k.status("live");
        },
        closed: (e) => {
          if ((e as CloseEvent | undefined)?.code === 4403) refused = true;
        },
      },
    });
    client = c;
    window.__forge = {
      sockets: (window.__forge?.sockets ?? 0) + 1,
      terminate: () => c.terminate(),
    };
    k.starting();
    k.status("connecting");
    unsubscribe = c.subscribe<T>(
      { query: k.query, variables: k.variables() },
      {
        next: (result) => {
          if (result.errors?.length) {
            const code = (result.errors[0].extensions as { code?: string } | undefined)?.code;
            if (code === "UNAUTHENTICATED") refused = true;
            return;
          }
          if (result.data && k.data(result.data as T)) {
            unsubscribe?.();
            unsubscribe = null;
            retry();
          }
        },
        error: () => (refused ? refusedNow() : retry()),
        complete: () => (refused ? refusedNow() : retry()),
      },
    );
  };

  start();
  return {
    stop() {
      stopped = true;
      if (timer) clearTimeout(timer);
      unsubscribe?.();
      client?.dispose();
    },
  };
}

/** Follows `threadId` until `stop()`. */
export function follow(threadId: string, h: Handlers): { stop(): void } {
  return keep<{ threadEvents: { item: StreamItem } }>({
    query: THREAD_EVENTS,
    variables: () => ({ threadId, after: h.cursors() }),
    starting: () => h.resubscribed(),
    data: (d) => {
      h.item(d.threadEvents.item);
      // The log moved on past us: start again from the cursors.
      return h.gap();
    },
    status: h.status,
    signInRequired: h.signInRequired,
  });
}

const PENDING = `subscription Pending {
  pendingInteractions { id kind runId threadId status request expiresAt }
}`;

/** A pending approval or question the caller may act on. */
export interface Pending {
  id: string;
  kind: "approval" | "question";
  runId: string;
  threadId: string;
  status: string;
  request: Record<string, unknown>;
  expiresAt: string;
}

/** Follows the caller's pending approvals and questions until `stop()`. */
export function followPending(
  list: (items: Pending[]) => void,
  status: Handlers["status"],
  signInRequired: () => void,
): { stop(): void } {
  return keep<{ pendingInteractions: Pending[] }>({
    query: PENDING,
    variables: () => ({}),
    starting: () => {},
    data: (d) => {
      list(d.pendingInteractions);
    },
    status,
    signInRequired,
  });
}

// Following runs live over `graphql-transport-ws`, without gaps across reconnects.
//
// A subscription carries each run's last committed sequence number (`after`), so a new
// subscription — after a dropped socket, a server restart, a gap the reducer saw — receives
// exactly the committed events it is missing; provisional ones are dropped first
// (`resubscribed`). Reconnects back off exponentially, with jitter. A refused token (close code
// 4403, or an error saying so) stops following and asks for a new one; following resumes from
// the cursors when the caller starts again.

import { createClient, type Client } from "graphql-ws";

import type { StreamItem } from "./generated/wire";
import { type ThreadState, cursors, emptyThread, hasGap, reduce } from "./reducer";

/** Where the server is and how to authenticate to it. */
export interface Connection {
  /** The WebSocket URL of the GraphQL endpoint, such as `wss://forge.example.com/graphql`. */
  url: string;
  /** The bearer token to connect with, read again on every reconnect; `null`: signed out. */
  token(): string | null;
  /** A WebSocket implementation where the platform has none (Node 20: the `ws` package). */
  webSocketImpl?: unknown;
  /** Told of each new socket client (tests use it to cut the connection). */
  onClient?(client: { terminate(): void }): void;
}

/** The state of a kept-up subscription. */
export type LiveStatus = "connecting" | "live" | "reconnecting" | "signed-out";

/** A running subscription: stop it to close its socket. */
export interface Following {
  stop(): void;
}

const THREAD_EVENTS = `subscription Follow($threadId: ID!, $after: [RunCursor!]!) {
  threadEvents(threadId: $threadId, after: $after) { item }
}`;

const RUN_EVENTS = `subscription FollowRun($runId: ID!, $after: Int!) {
  runEvents(runId: $runId, afterSeq: $after) { item }
}`;

const PENDING = `subscription Pending {
  pendingInteractions { id kind runId threadId status request expiresAt }
}`;

/** The delay before reconnect number `attempt` (from 0): exponential, capped, the upper half random. */
export function backoff(attempt: number, random: () => number = Math.random): number {
  const ceiling = Math.min(10_000, 250 * 2 ** Math.min(attempt, 10));
  return Math.round(ceiling / 2 + random() * (ceiling / 2));
}

/** What a follower of stream items reports. */
export interface Handlers {
  /** A new subscription began: drop provisional events (the reducer's `resubscribed`). */
  resubscribed(): void;
  /** An item arrived (the reducer's `item`). */
  item(item: StreamItem): void;
  /** The cursors to subscribe with: each run's last committed seq (the reducer's `cursors`). */
  cursors(): { runId: string; seq: number }[];
  /** Whether the view saw a gap (resubscribe now; the reducer's `hasGap`). */
  gap(): boolean;
  /** Connection state. */
  status(s: LiveStatus): void;
  /** The token was refused. */
  signInRequired(): void;
}

/** How one kept-up subscription is asked and what it reports. */
interface Kept<T> {
  query: string;
  /** The variables of each new subscription (read again on every reconnect). */
  variables(): Record<string, unknown>;
  /** A new subscription begins. */
  starting(): void;
  /** One result; `"again"` asks to start again (a gap), `"done"` to stop for good. */
  data(value: T): "again" | "done" | void;
  status(s: LiveStatus): void;
  signInRequired(): void;
}

/** Keeps a subscription up until `stop()`: reconnecting with backoff, stopping on refusal. */
function keep<T>(conn: Connection, k: Kept<T>): Following {
  let stopped = false;
  let attempt = 0;
  let client: Client | null = null;
  let timer: ReturnType<typeof setTimeout> | null = null;
  let unsubscribe: (() => void) | null = null;

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
    const t = conn.token();
    if (!t) return refusedNow();
    client?.dispose();
    let refused = false;
    const c = createClient({
      url: conn.url,
      lazy: true,
      retryAttempts: 0,
      connectionParams: { authorization: `Bearer ${t}` },
      ...(conn.webSocketImpl ? { webSocketImpl: conn.webSocketImpl } : {}),
      on: {
        connected: () => {
          attempt = 0;
          k.status("live");
        },
        closed: (e) => {
          if ((e as { code?: number } | undefined)?.code === 4403) refused = true;
        },
      },
    });
    client = c;
    conn.onClient?.({ terminate: () => c.terminate() });
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
          if (!result.data) return;
          const next = k.data(result.data as T);
          if (next === "done") {
            stop();
          } else if (next === "again") {
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

  const stop = () => {
    stopped = true;
    if (timer) clearTimeout(timer);
    unsubscribe?.();
    unsubscribe = null;
    client?.dispose();
  };
  start();
  return { stop };
}

/** Follows every run of `threadId` until `stop()`: the thread takes new runs, so it never ends. */
export function followThread(conn: Connection, threadId: string, h: Handlers): Following {
  return keep<{ threadEvents: { item: StreamItem } }>(conn, {
    query: THREAD_EVENTS,
    variables: () => ({ threadId, after: h.cursors() }),
    starting: () => h.resubscribed(),
    data: (d) => {
      h.item(d.threadEvents.item);
      // The log moved on past us: start again from the cursors.
      return h.gap() ? "again" : undefined;
    },
    status: h.status,
    signInRequired: h.signInRequired,
  });
}

/**
 * Follows one run until its terminal event is committed (then stops by itself and calls `ended`),
 * or until `stop()`. A terminal event seen provisionally counts once it is confirmed.
 */
export function followRun(
  conn: Connection,
  runId: string,
  h: Handlers & { ended?(): void },
): Following {
  let terminal: number | null = null;
  return keep<{ runEvents: { item: StreamItem } }>(conn, {
    query: RUN_EVENTS,
    variables: () => ({ runId, after: h.cursors().find((c) => c.runId === runId)?.seq ?? 0 }),
    starting: () => {
      terminal = null;
      h.resubscribed();
    },
    data: (d) => {
      const item = d.runEvents.item;
      h.item(item);
      if (item.kind === "provisional" && TERMINAL.has(item.event.type)) terminal = item.event.seq;
      if (item.kind === "discarded" && terminal !== null && terminal > item.after_seq) terminal = null;
      const ended =
        (item.kind === "committed" && TERMINAL.has(item.event.type)) ||
        (item.kind === "confirmed" && terminal !== null && item.through_seq >= terminal);
      if (ended) {
        h.ended?.();
        return "done";
      }
      return h.gap() ? "again" : undefined;
    },
    status: h.status,
    signInRequired: h.signInRequired,
  });
}

const TERMINAL = new Set(["run.completed", "run.failed", "run.cancelled"]);

/** A thread's view, kept current by a live subscription. */
export interface LiveThread extends Following {
  /** The view now. */
  state(): ThreadState;
}

/**
 * Follows `threadId` and folds what arrives into its view (the reducer), calling `changed` with
 * each new view: the whole client side of a live thread. `from` resumes a view kept from before
 * (after signing in again, say): only what it lacks is sent.
 */
export function liveThread(
  conn: Connection,
  threadId: string,
  on: { changed(state: ThreadState): void; status?(s: LiveStatus): void; signInRequired?(): void },
  from: ThreadState = emptyThread,
): LiveThread {
  let state = from;
  const apply = (next: ThreadState) => {
    if (next !== state) {
      state = next;
      on.changed(state);
    }
  };
  const following = followThread(conn, threadId, {
    resubscribed: () => apply(reduce(state, { type: "resubscribed" })),
    item: (item) => apply(reduce(state, { type: "item", item })),
    cursors: () => cursors(state),
    gap: () => hasGap(state),
    status: (s) => on.status?.(s),
    signInRequired: () => on.signInRequired?.(),
  });
  return { stop: () => following.stop(), state: () => state };
}

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
  conn: Connection,
  list: (items: Pending[]) => void,
  status: (s: LiveStatus) => void,
  signInRequired: () => void,
): Following {
  return keep<{ pendingInteractions: Pending[] }>(conn, {
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

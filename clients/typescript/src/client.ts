// The GraphQL API over fetch: queries and mutations, the error classes callers branch on, and the
// calls every client makes (threads, runs, approvals, questions).

import type { JsonValue } from "./generated/wire";

/** A GraphQL error as the server classifies it (`NOT_FOUND`, `CONFLICT`, `FORBIDDEN`, …). */
export class ApiError extends Error {
  readonly code: string;
  constructor(code: string, message: string) {
    super(message);
    this.code = code;
  }
}

/** The token is missing, malformed or expired: the user must sign in again. */
export class SignInRequired extends Error {
  constructor() {
    super("sign in again");
  }
}

/** Where the server is and how to call it. */
export interface ClientOptions {
  /** The HTTP URL of the GraphQL endpoint, such as `https://forge.example.com/graphql`. */
  url: string;
  /** The bearer token, read on every call; `null`: signed out. */
  token(): string | null;
  /** Called before a `SignInRequired` is thrown (show the sign-in form, keep the view). */
  onSignInRequired?(): void;
  /** The fetch to use (the platform's by default). */
  fetch?: typeof fetch;
}

/** A new idempotency key: one per decision a person makes, reused when it is retried. */
export function newKey(): string {
  if (typeof crypto.randomUUID === "function") return crypto.randomUUID();
  // Outside a secure context (a LAN address over plain HTTP) there is no randomUUID.
  const bytes = crypto.getRandomValues(new Uint8Array(16));
  return Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}

/** What an approval or a question became. */
export interface Resolved {
  id: string;
  status: string;
}

/** A client of one Forge server. */
export interface ForgeClient {
  /** Runs a query or mutation; errors are `ApiError` or `SignInRequired`. */
  gql<T>(query: string, variables?: Record<string, JsonValue | undefined>): Promise<T>;
  /** Creates a thread. */
  createThread(title?: string): Promise<{ id: string }>;
  /**
   * Starts a run of `agent` on `threadId` with the user's `message`. With `idempotencyKey`, the
   * same call sent again (after a timeout or a dropped connection) is the run the first started.
   */
  startRun(
    threadId: string,
    agent: string,
    message: string,
    options?: { idempotencyKey?: string },
  ): Promise<{ id: string }>;
  /** Asks a run to cancel; `false` when it had ended or was already asked. */
  cancelRun(runId: string): Promise<boolean>;
  /**
   * Approves or rejects a tool call. `inputHash` is the hash of the input the person saw (an
   * approval for another input is refused); `key` makes a retry repeat the same decision.
   */
  resolveApproval(
    interactionId: string,
    decision: { approve: boolean; inputHash: string; key: string; reason?: string },
  ): Promise<Resolved>;
  /** Answers a question; the answer is checked against its schema. */
  answerQuestion(interactionId: string, answer: JsonValue, key: string): Promise<Resolved>;
}

/** A client of the server at `options.url`. */
export function createForgeClient(options: ClientOptions): ForgeClient {
  const fetchFn = options.fetch ?? fetch;
  const refused = (): never => {
    options.onSignInRequired?.();
    throw new SignInRequired();
  };

  async function gql<T>(query: string, variables: Record<string, JsonValue | undefined> = {}): Promise<T> {
    const t = options.token();
    if (!t) return refused();
    const response = await fetchFn(options.url, {
      method: "POST",
      headers: { "content-type": "application/json", authorization: `Bearer ${t}` },
      body: JSON.stringify({ query, variables }),
    });
    if (response.status === 401) return refused();
    const body = (await response.json()) as {
      data?: T;
      errors?: { message: string; extensions?: { code?: string } }[];
    };
    if (body.errors?.length) {
      const e = body.errors[0];
      const code = e.extensions?.code ?? "ERROR";
      if (code === "UNAUTHENTICATED") return refused();
      throw new ApiError(code, e.message);
    }
    if (!body.data) throw new ApiError("ERROR", "the server answered nothing");
    return body.data;
  }

  return {
    gql,
    async createThread(title) {
      const d = await gql<{ createThread: { id: string } }>(
        "mutation New($title: String) { createThread(title: $title) { id } }",
        { title },
      );
      return d.createThread;
    },
    async startRun(threadId, agent, message, options) {
      const d = await gql<{ startRun: { id: string } }>(
        "mutation Start($input: StartRunInput!) { startRun(input: $input) { id } }",
        {
          input: options?.idempotencyKey
            ? { threadId, agent, message, idempotencyKey: options.idempotencyKey }
            : { threadId, agent, message },
        },
      );
      return d.startRun;
    },
    async cancelRun(runId) {
      const d = await gql<{ cancelRun: boolean }>("mutation Cancel($id: ID!) { cancelRun(runId: $id) }", {
        id: runId,
      });
      return d.cancelRun;
    },
    async resolveApproval(interactionId, decision) {
      const d = await gql<{ resolveApproval: Resolved }>(
        `mutation Resolve($id: ID!, $approve: Boolean!, $key: String!, $hash: String, $reason: String) {
          resolveApproval(interactionId: $id, approve: $approve, key: $key, inputHash: $hash, reason: $reason) { id status }
        }`,
        {
          id: interactionId,
          approve: decision.approve,
          key: decision.key,
          hash: decision.inputHash,
          reason: decision.reason ?? null,
        },
      );
      return d.resolveApproval;
    },
    async answerQuestion(interactionId, answer, key) {
      const d = await gql<{ answerQuestion: Resolved }>(
        `mutation Answer($id: ID!, $answer: JSON!, $key: String!) {
          answerQuestion(interactionId: $id, answer: $answer, key: $key) { id status }
        }`,
        { id: interactionId, answer, key },
      );
      return d.answerQuestion;
    },
  };
}

// The page's client of the server that served it (the client package's, with the tab's token),
// the error classes the screens branch on, and development sign-in.

import { ApiError, type JsonValue, SignInRequired, createForgeClient } from "@forge/client";

export { ApiError, SignInRequired } from "@forge/client";

let onSignInRequired: () => void = () => {};

/** What the app does when the server refuses the token (keep the view, show sign-in). */
export function whenSignInRequired(f: () => void): void {
  onSignInRequired = f;
}

/** The server refused the token: do what the app said to. */
export function signInRequired(): void {
  onSignInRequired();
}

const TOKEN = "forge.token";
const ENDED = "forge.sessionEnded";

/** Who a session was for, and when and why it ended (shown on the sign-in form). */
export interface SessionEnd {
  sub: string;
  tenant: string;
  roles: string[];
  /** Milliseconds since the epoch. */
  at: number;
  reason: "expired" | "refused";
}

/**
 * The current token, shared by every tab of this origin (`localStorage`), or `null` when signed
 * out or when it has expired (the expiry is then remembered for the sign-in form).
 */
export function token(): string | null {
  const t = localStorage.getItem(TOKEN);
  if (!t) return null;
  const exp = claims(t)?.exp;
  if (exp && exp * 1000 <= Date.now()) {
    endSession("expired", t);
    return null;
  }
  return t;
}

/** Signs in (every tab) with `t`, or out with `null`. */
export function setToken(t: string | null): void {
  if (t) {
    localStorage.setItem(TOKEN, t);
    localStorage.removeItem(ENDED);
  } else localStorage.removeItem(TOKEN);
}

/** The session ended (it expired, or the server refused its token): remember whose it was. */
export function endSession(reason: SessionEnd["reason"], t: string | null = localStorage.getItem(TOKEN)): void {
  const c = claims(t);
  if (c?.sub) {
    const exp = c.exp ? c.exp * 1000 : Date.now();
    const end: SessionEnd = {
      sub: c.sub,
      tenant: c.tenant_id ?? "",
      roles: c.roles ?? [],
      at: reason === "expired" ? Math.min(exp, Date.now()) : Date.now(),
      reason: reason === "refused" && exp <= Date.now() ? "expired" : reason,
    };
    localStorage.setItem(ENDED, JSON.stringify(end));
  }
  localStorage.removeItem(TOKEN);
}

/** How the last session ended (in any tab), if it did and no one signed in since. */
export function sessionEnd(): SessionEnd | null {
  try {
    return JSON.parse(localStorage.getItem(ENDED) ?? "null") as SessionEnd | null;
  } catch {
    return null;
  }
}

/** Calls `f` when another tab signs in or out. */
export function onSessionChange(f: () => void): () => void {
  const listener = (e: StorageEvent) => {
    if (e.key === TOKEN || e.key === null) f();
  };
  window.addEventListener("storage", listener);
  return () => window.removeEventListener("storage", listener);
}

/** The token's claims, without verifying them (the server does). */
export function claims(t: string | null = token()): { sub?: string; tenant_id?: string; exp?: number; roles?: string[] } | null {
  if (!t) return null;
  const part = t.split(".")[1];
  if (!part) return null;
  try {
    const json = atob(part.replace(/-/g, "+").replace(/_/g, "/"));
    return JSON.parse(json);
  } catch {
    return null;
  }
}

/** The page's client: threads, runs, approvals and questions. */
export const forge = createForgeClient({
  url: "/graphql",
  token,
  onSignInRequired: () => onSignInRequired(),
});

/** Runs a query or mutation. */
export function gql<T>(query: string, variables: Record<string, JsonValue | undefined> = {}): Promise<T> {
  return forge.gql<T>(query, variables);
}

/** A message for people from any error. */
export function describe(e: unknown): string {
  if (e instanceof ApiError) {
    switch (e.code) {
      case "NOT_FOUND":
        return "Not found.";
      case "CONFLICT":
        return `That changed meanwhile: ${e.message}`;
      case "FORBIDDEN":
        return `Not permitted: ${e.message}`;
      default:
        return e.message;
    }
  }
  if (e instanceof SignInRequired) return "Sign in again.";
  return e instanceof Error ? e.message : String(e);
}

/** Whether the server offers development sign-in. */
export async function devSignInEnabled(): Promise<boolean> {
  try {
    const r = await fetch("/auth/config");
    if (!r.ok) return false;
    const body = (await r.json()) as { dev_sign_in?: boolean };
    return body.dev_sign_in === true;
  } catch {
    return false;
  }
}

/** A development token. */
export async function devSignIn(tenant: string, principal: string, roles: string[]): Promise<string> {
  const r = await fetch("/auth/dev", {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ tenant, principal, roles }),
  });
  const body = (await r.json()) as { token?: string; errors?: { message: string }[] };
  if (!r.ok || !body.token) throw new ApiError("BAD_REQUEST", body.errors?.[0]?.message ?? "sign-in failed");
  return body.token;
}

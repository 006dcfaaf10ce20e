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

/** The current token (kept for this tab only). */
export function token(): string | null {
  return sessionStorage.getItem("forge.token");
}

export function setToken(t: string | null): void {
  if (t) sessionStorage.setItem("forge.token", t);
  else sessionStorage.removeItem("forge.token");
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
        return `Someone else got there first: ${e.message}`;
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

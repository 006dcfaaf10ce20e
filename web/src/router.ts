// Paths as routes: `/`, `/sign-in`, `/threads/:id`, the console's `/console/…`, kept in the
// address bar (a reload lands where the user was; the query string holds a screen's filters).

import { useSyncExternalStore } from "react";

/** The operator console's screens. */
export type ConsoleScreen = "runs" | "run" | "dead-letters" | "audit" | "usage" | "mcp";

export type Route =
  | { name: "threads" }
  | { name: "sign-in" }
  | { name: "thread"; id: string }
  | { name: "console"; screen: ConsoleScreen; id?: string }
  | { name: "missing" };

export function parse(path: string): Route {
  if (path === "/" || path === "") return { name: "threads" };
  if (path === "/sign-in") return { name: "sign-in" };
  const m = /^\/threads\/([^/]+)$/.exec(path);
  if (m) return { name: "thread", id: decodeURIComponent(m[1]) };
  if (path === "/console" || path === "/console/runs") return { name: "console", screen: "runs" };
  const run = /^\/console\/runs\/([^/]+)$/.exec(path);
  if (run) return { name: "console", screen: "run", id: decodeURIComponent(run[1]) };
  if (path === "/console/dead-letters") return { name: "console", screen: "dead-letters" };
  if (path === "/console/audit") return { name: "console", screen: "audit" };
  if (path === "/console/usage") return { name: "console", screen: "usage" };
  if (path === "/console/mcp") return { name: "console", screen: "mcp" };
  return { name: "missing" };
}

const listeners = new Set<() => void>();
window.addEventListener("popstate", () => listeners.forEach((l) => l()));

export function navigate(path: string, replace = false): void {
  if (replace) history.replaceState(null, "", path);
  else history.pushState(null, "", path);
  listeners.forEach((l) => l());
}

/**
 * A link's click: followed in the page, unless the user asked for a new tab or window (a
 * modifier key, or not the main button), which the browser then opens from the link's `href`.
 */
export function follow(e: { preventDefault(): void; button: number; metaKey: boolean; ctrlKey: boolean; shiftKey: boolean; altKey: boolean }, path: string): void {
  if (e.button !== 0 || e.metaKey || e.ctrlKey || e.shiftKey || e.altKey) return;
  e.preventDefault();
  navigate(path);
}

/** Where the page is, read again on every navigation; `search` is the query string of it. */
export function useRoute(): Route & { search: string } {
  const at = useSyncExternalStore(
    (l) => {
      listeners.add(l);
      return () => listeners.delete(l);
    },
    () => location.pathname + location.search,
  );
  const q = at.indexOf("?");
  return { ...parse(q < 0 ? at : at.slice(0, q)), search: q < 0 ? "" : at.slice(q) };
}

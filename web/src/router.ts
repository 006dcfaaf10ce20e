// Paths as routes: `/`, `/sign-in`, `/threads/:id`, kept in the address bar (a reload lands
// where the user was).

import { useSyncExternalStore } from "react";

export type Route =
  | { name: "threads" }
  | { name: "sign-in" }
  | { name: "thread"; id: string }
  | { name: "missing" };

export function parse(path: string): Route {
  if (path === "/" || path === "") return { name: "threads" };
  if (path === "/sign-in") return { name: "sign-in" };
  const m = /^\/threads\/([^/]+)$/.exec(path);
  if (m) return { name: "thread", id: decodeURIComponent(m[1]) };
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

export function useRoute(): Route {
  const path = useSyncExternalStore(
    (l) => {
      listeners.add(l);
      return () => listeners.delete(l);
    },
    () => location.pathname,
  );
  return parse(path);
}

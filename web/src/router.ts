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

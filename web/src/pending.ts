// The caller's pending approvals and questions, live: one subscription for the whole page,
// started by the first component that reads it and stopped by the last.

import { useSyncExternalStore } from "react";

import { type Pending, followPending } from "./live";

export type { Pending } from "./live";

let items: Pending[] = [];
let loaded = false;
let following: { stop(): void } | null = null;
const listeners = new Set<() => void>();
let snapshot = { items, loaded };

function emit() {
  snapshot = { items, loaded };
  listeners.forEach((l) => l());
}

function subscribe(l: () => void): () => void {
  listeners.add(l);
  if (!following) {
    following = followPending(
      (list) => {
        items = list;
        loaded = true;
        emit();
      },
      () => {},
      // A refused token: the next request of the page sends the user to sign in.
      () => {},
    );
  }
  return () => {
    listeners.delete(l);
    if (listeners.size === 0 && following) {
      following.stop();
      following = null;
    }
  };
}

/** The pending list as last received, and whether anything was received yet. */
export function usePending(): { items: Pending[]; loaded: boolean } {
  return useSyncExternalStore(subscribe, () => snapshot);
}

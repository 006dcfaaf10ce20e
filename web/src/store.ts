// Thread views kept outside React, so that signing in again (or leaving a thread and coming
// back) keeps what was shown; the page reads them with useSyncExternalStore.

import { useSyncExternalStore } from "react";

import { type Action, type ThreadState, emptyThread, reduce } from "@forge/client";

const threads = new Map<string, ThreadState>();
const listeners = new Set<() => void>();

export function threadState(id: string): ThreadState {
  return threads.get(id) ?? emptyThread;
}

export function dispatch(id: string, action: Action): void {
  const before = threadState(id);
  const after = reduce(before, action);
  if (after !== before) {
    threads.set(id, after);
    listeners.forEach((l) => l());
  }
}

function subscribe(l: () => void): () => void {
  listeners.add(l);
  return () => listeners.delete(l);
}

export function useThread(id: string): ThreadState {
  return useSyncExternalStore(subscribe, () => threadState(id));
}

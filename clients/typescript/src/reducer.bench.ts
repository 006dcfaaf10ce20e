// Reducer throughput: a long streamed run (one text part fed 10,000 deltas, provisional then
// confirmed, plus the committed tail) folded item by item, and a committed replay of it.
//
//   npm run bench     (events per second = 20,000 items / the mean time per iteration)

import { bench, describe } from "vitest";

import type { RunEvent, StreamItem } from "./generated/wire";
import { emptyThread, reduce } from "./reducer";

const RUN = "01a23500-0000-7000-8000-000000000001";
const MSG = "01a23500-0000-7000-8000-0000000000bb";

function events(n: number): RunEvent[] {
  const out: RunEvent[] = [];
  let seq = 0;
  const at = new Date(1_800_000_000_000).toISOString();
  const push = (e: Omit<RunEvent, "run_id" | "seq" | "at">) =>
    out.push({ run_id: RUN, seq: ++seq, at, ...e } as RunEvent);
  push({ type: "run.started", thread_id: RUN, agent: { name: "a", version: "1" }, model: "m" } as never);
  push({ type: "step.started", step: 1 } as never);
  push({ type: "part.added", message_id: MSG, role: "assistant", index: 0, part: { type: "text", text: "" } } as never);
  for (let i = 0; i < n; i++) {
    push({ type: "part.updated", message_id: MSG, index: 0, update: { type: "text_delta", text: `w${i} ` } } as never);
  }
  push({ type: "run.completed", text: "done", usage: { input_tokens: 1, output_tokens: n } } as never);
  return out;
}

const log = events(10_000);
const streamed: StreamItem[] = [
  ...log.map((event): StreamItem => ({ kind: "provisional", event })),
  { kind: "confirmed", run_id: RUN, through_seq: log.length },
];
const replay: StreamItem[] = log.map((event) => ({ kind: "committed", event }));

describe("reducer", () => {
  bench(`${streamed.length} live items (provisional, then confirmed)`, () => {
    streamed.reduce((s, item) => reduce(s, { type: "item", item }), emptyThread);
  });
  bench(`${replay.length} committed items (a replay after a reload)`, () => {
    replay.reduce((s, item) => reduce(s, { type: "item", item }), emptyThread);
  });
});

import { describe, expect, it } from "vitest";
import fc from "fast-check";

import type { RunEvent, RunEventType, StreamItem } from "./generated/wire";
import {
  type Action,
  type ThreadState,
  assistantText,
  cursors,
  emptyRun,
  emptyThread,
  hasGap,
  isStale,
  reduce,
  toolCall,
} from "./reducer";
import calculatorLog from "./fixtures/calculator.jsonl?raw";
import slowLog from "./fixtures/slow.jsonl?raw";

/** A stream recorded from `forge run --json` (the items a subscriber receives). */
function recorded(text: string): StreamItem[] {
  return text
    .split("\n")
    .filter((l) => l.trim().length > 0)
    .map((l) => JSON.parse(l) as StreamItem);
}

const calculator = recorded(calculatorLog);
const slow = recorded(slowLog);

function run(items: StreamItem[], from: ThreadState = emptyThread): ThreadState {
  return items.reduce((s, item) => reduce(s, { type: "item", item }), from);
}

/** The committed log the recorded stream describes: its committed events and confirmed ones. */
function committedLog(items: StreamItem[]): RunEvent[] {
  const out: RunEvent[] = [];
  const pending: RunEvent[] = [];
  for (const item of items) {
    if (item.kind === "committed") out.push(item.event);
    if (item.kind === "provisional") pending.push(item.event);
    if (item.kind === "confirmed") {
      while (pending.length && pending[0].seq <= item.through_seq) out.push(pending.shift()!);
    }
    if (item.kind === "discarded") {
      while (pending.length && pending[pending.length - 1].seq > item.after_seq) pending.pop();
    }
  }
  return out.sort((a, b) => a.seq - b.seq);
}

const committedItems = (events: RunEvent[]): StreamItem[] =>
  events.map((event) => ({ kind: "committed", event }));

const RUN = "01a23500-0000-7000-8000-000000000001";
const THREAD = "01a23500-0000-7000-8000-0000000000aa";
const MSG = "01a23500-0000-7000-8000-0000000000bb";
const TOOL_MSG = "01a23500-0000-7000-8000-0000000000cc";
let at = 0;

/** A typed event of the run, numbered in order. */
function ev(seq: number, kind: DistributiveOmit<RunEvent, "run_id" | "seq" | "at">): RunEvent {
  at += 1;
  return {
    run_id: RUN,
    seq,
    at: new Date(1_800_000_000_000 + at).toISOString(),
    ...kind,
  } as RunEvent;
}

type DistributiveOmit<T, K extends PropertyKey> = T extends unknown ? Omit<T, K> : never;

/** Every kind of event, in an order a run could produce them. */
const everyKind: RunEvent[] = [
  ev(1, { type: "run.queued", thread_id: THREAD, behind: "01a23500-0000-7000-8000-000000000009" }),
  ev(2, {
    type: "run.started",
    thread_id: THREAD,
    agent: { name: "payments", version: "1" },
    model: "scripted:payments.script.toml",
  }),
  ev(3, { type: "step.started", step: 1 }),
  ev(4, { type: "part.added", message_id: MSG, role: "assistant", index: 0, part: { type: "text", text: "Pay" } }),
  ev(5, { type: "part.updated", message_id: MSG, index: 0, update: { type: "text_delta", text: "ing." } }),
  ev(6, {
    type: "part.added",
    message_id: MSG,
    role: "assistant",
    index: 1,
    part: { type: "tool_call", tool_call_id: "c1", tool_name: "pay_invoice", input: null },
  }),
  ev(7, { type: "part.updated", message_id: MSG, index: 1, update: { type: "input_delta", json: "{\"amount\":" } }),
  ev(8, { type: "part.updated", message_id: MSG, index: 1, update: { type: "input_delta", json: "500}" } }),
  ev(9, {
    type: "part.updated",
    message_id: MSG,
    index: 1,
    update: {
      type: "replaced",
      part: { type: "tool_call", tool_call_id: "c1", tool_name: "pay_invoice", input: { amount: 500 } },
    },
  }),
  ev(10, {
    type: "usage.updated",
    step: 1,
    call: { input_tokens: 10, output_tokens: 3 },
    total: { input_tokens: 10, output_tokens: 3 },
  }),
  ev(11, {
    type: "approval.requested",
    interaction_id: "i1",
    tool_call_id: "c1",
    tool_name: "pay_invoice",
    input_hash: "ab",
    preview: { summary: "Pay invoice 7 of 500 €", facts: [{ label: "Payee", value: "Zoë" }] },
  }),
  ev(12, {
    type: "question.requested",
    interaction_id: "i2",
    prompt: "Which currency?",
    answer_schema: { type: "string" },
  }),
  ev(13, { type: "run.checkpointed", step: 1, version: 3 }),
  ev(14, { type: "state.updated", version: 2, keys: ["currency"] }),
  ev(15, {
    type: "thread.compacted",
    version: 1,
    through: MSG,
    covered: 3,
    model: "scripted:x",
  }),
  ev(16, {
    type: "part.added",
    message_id: TOOL_MSG,
    role: "tool",
    index: 0,
    part: {
      type: "tool_result",
      tool_call_id: "c1",
      tool_name: "pay_invoice",
      output: { receipt: "rcpt-1" },
      is_error: false,
      trust: "untrusted",
      tool_version: "1",
    },
  }),
  ev(17, {
    type: "part.added",
    message_id: TOOL_MSG,
    role: "tool",
    index: 1,
    part: {
      type: "citation",
      source_id: "handbook",
      source_version: "sha256:1",
      span: { start: 3, end: 9 },
      excerpt: "30 days",
    },
  }),
  ev(18, { type: "run.completed", text: "Paid.", usage: { input_tokens: 20, output_tokens: 6 } }),
];

describe("every event kind", () => {
  it("folds into the run's view", () => {
    const steps: { seq: number; check: (s: ThreadState) => void }[] = [
      { seq: 1, check: (s) => expect(s.runs[RUN].view.status).toBe("queued") },
      { seq: 2, check: (s) => expect(s.runs[RUN].view.agent).toBe("payments@1") },
      { seq: 5, check: (s) => expect(assistantText(s.runs[RUN].view)).toBe("Paying.") },
      {
        seq: 8,
        check: (s) => {
          const { call } = toolCall(s.runs[RUN].view, "c1");
          expect(call?.streamedInput).toBe("{\"amount\":500}");
        },
      },
      {
        seq: 9,
        check: (s) => {
          const { call } = toolCall(s.runs[RUN].view, "c1");
          expect(call?.type === "tool_call" && call.input).toEqual({ amount: 500 });
        },
      },
      { seq: 10, check: (s) => expect(s.runs[RUN].view.usage?.output_tokens).toBe(3) },
      {
        seq: 11,
        check: (s) => {
          expect(s.runs[RUN].view.status).toBe("waiting-approval");
          expect(s.runs[RUN].view.approvals[0].toolName).toBe("pay_invoice");
          expect(s.runs[RUN].view.approvals[0].preview?.facts).toEqual([
            { label: "Payee", value: "Zoë" },
          ]);
        },
      },
      { seq: 12, check: (s) => expect(s.runs[RUN].view.questions[0].prompt).toBe("Which currency?") },
      { seq: 13, check: (s) => expect(s.runs[RUN].view.steps).toBe(1) },
      { seq: 14, check: (s) => expect(s.runs[RUN].view.stateVersion).toBe(2) },
      { seq: 15, check: (s) => expect(s.runs[RUN].view.compactions).toBe(1) },
      { seq: 16, check: (s) => expect(toolCall(s.runs[RUN].view, "c1").result).not.toBeNull() },
      { seq: 17, check: (s) => expect(s.runs[RUN].view.citations[0].excerpt).toBe("30 days") },
      {
        seq: 18,
        check: (s) => {
          expect(s.runs[RUN].view.status).toBe("completed");
          expect(s.runs[RUN].view.finalText).toBe("Paid.");
        },
      },
    ];
    let state = emptyThread;
    for (const e of everyKind) {
      state = reduce(state, { type: "item", item: { kind: "committed", event: e } });
      steps.filter((s) => s.seq === e.seq).forEach((s) => s.check(state));
    }
    expect(state.runs[RUN].committedSeq).toBe(18);
  });

  it("the fixtures cover every kind there is", () => {
    // A new kind makes this object incomplete: a type error until a fixture covers it.
    const every: Record<RunEventType, true> = {
      "run.queued": true,
      "run.started": true,
      "step.started": true,
      "part.added": true,
      "part.updated": true,
      "usage.updated": true,
      "approval.requested": true,
      "question.requested": true,
      "state.updated": true,
      "thread.compacted": true,
      "run.checkpointed": true,
      "run.completed": true,
      "run.failed": true,
      "run.cancelled": true,
    };
    const covered = new Set([...everyKind.map((e) => e.type), "run.failed", "run.cancelled"]);
    expect([...covered].sort()).toEqual(Object.keys(every).sort());
  });

  it("ends failed or cancelled with the reason", () => {
    const failed = run(
      committedItems([
        ev(1, { type: "run.started", thread_id: THREAD, agent: { name: "a", version: "1" }, model: "m" }),
        ev(2, { type: "run.failed", failure: { code: "provider_error", message: "the model call failed" } }),
      ]),
    );
    expect(failed.runs[RUN].view.status).toBe("failed");
    expect(failed.runs[RUN].view.failure?.code).toBe("provider_error");
    const cancelled = run(committedItems([ev(1, { type: "run.cancelled", reason: "asked" })]));
    expect(cancelled.runs[RUN].view.cancelReason).toBe("asked");
  });
});

describe("replays and gaps", () => {
  it("an event at or below the last seen seq changes nothing", () => {
    const once = run(calculator);
    const twice = run(calculator, once);
    expect(twice).toBe(once);
    const log = committedLog(calculator);
    const again = run(committedItems(log), once);
    expect(again).toBe(once);
  });

  it("a gap is detected, not applied, and resumed from the cursor", () => {
    const log = committedLog(calculator);
    const head = run(committedItems(log.slice(0, 5)));
    const skipped = run(committedItems(log.slice(7, 9)), head);
    expect(hasGap(skipped)).toBe(true);
    expect(skipped.runs[log[0].run_id].committedSeq).toBe(5);
    expect(cursors(skipped)).toEqual([{ runId: log[0].run_id, seq: 5 }]);
    // Resubscribed from the cursor: the rest arrives in order and the gap closes.
    let resumed = reduce(skipped, { type: "resubscribed" });
    resumed = run(committedItems(log.slice(5)), resumed);
    expect(hasGap(resumed)).toBe(false);
    expect(resumed.runs[log[0].run_id].view).toEqual(run(calculator).runs[log[0].run_id].view);
  });

  it("provisional events show at once, are confirmed by the commit, discarded when replaced", () => {
    const started = run(
      [
        { kind: "provisional", event: everyKind[1] },
        { kind: "provisional", event: everyKind[2] },
        { kind: "provisional", event: everyKind[3] },
      ],
      run(committedItems([everyKind[0]])),
    );
    expect(assistantText(started.runs[RUN].view)).toBe("Pay");
    expect(started.runs[RUN].committedSeq).toBe(1);
    // The step is executed again: what was shown after seq 2 goes.
    const discarded = reduce(started, {
      type: "item",
      item: { kind: "discarded", run_id: RUN, after_seq: 2 },
    });
    expect(assistantText(discarded.runs[RUN].view)).toBe("");
    expect(discarded.runs[RUN].provisional.map((e) => e.seq)).toEqual([2, 3].slice(0, 1));
    const confirmed = reduce(discarded, {
      type: "item",
      item: { kind: "confirmed", run_id: RUN, through_seq: 2 },
    });
    expect(confirmed.runs[RUN].committedSeq).toBe(2);
    expect(confirmed.runs[RUN].provisional).toEqual([]);
    // A committed event that disagrees with what was shown replaces it.
    const other = ev(3, {
      type: "part.added",
      message_id: MSG,
      role: "assistant",
      index: 0,
      part: { type: "text", text: "Other" },
    });
    const shown = run([{ kind: "provisional", event: everyKind[3] }], confirmed);
    const corrected = run([{ kind: "committed", event: other }], shown);
    expect(assistantText(corrected.runs[RUN].view)).toBe("Other");
    expect(corrected.runs[RUN].provisional).toEqual([]);
  });
});

describe("a renewed subscription", () => {
  const shown = () =>
    run(
      [
        { kind: "provisional", event: everyKind[1] },
        { kind: "provisional", event: everyKind[2] },
        { kind: "provisional", event: everyKind[3] },
      ],
      run(committedItems([everyKind[0]])),
    );

  it("keeps what was shown until the new subscription delivers it again", () => {
    const before = shown();
    const renewed = reduce(before, { type: "resubscribed" });
    expect(renewed.runs[RUN].view).toEqual(before.runs[RUN].view);
    expect(isStale(renewed.runs[RUN])).toBe(true);
    // The new subscription sends the step in flight again: nothing changes on screen, and once
    // it has caught up the view is current again.
    const again = run(
      [everyKind[1], everyKind[2]].map((event) => ({ kind: "provisional" as const, event })),
      renewed,
    );
    expect(again.runs[RUN].view).toEqual(before.runs[RUN].view);
    expect(isStale(again.runs[RUN])).toBe(true);
    const caughtUp = run([{ kind: "provisional", event: everyKind[3] }], again);
    expect(caughtUp.runs[RUN].view).toEqual(before.runs[RUN].view);
    expect(isStale(caughtUp.runs[RUN])).toBe(false);
    // A second drop before the first was caught up keeps the longer view.
    const twice = reduce(reduce(again, { type: "resubscribed" }), { type: "resubscribed" });
    expect(twice.runs[RUN].view).toEqual(before.runs[RUN].view);
    expect(twice.runs[RUN].stale.map((e) => e.seq)).toEqual([2, 3, 4]);
  });

  it("lets the commit confirm what was kept", () => {
    const renewed = reduce(shown(), { type: "resubscribed" });
    const committedAgain = run(committedItems([everyKind[1], everyKind[2], everyKind[3]]), renewed);
    expect(committedAgain.runs[RUN].committedSeq).toBe(4);
    expect(committedAgain.runs[RUN].view).toEqual(shown().runs[RUN].view);
    expect(isStale(committedAgain.runs[RUN])).toBe(false);
  });

  it("replaces what was kept when the log or the new stream differs", () => {
    const renewed = reduce(shown(), { type: "resubscribed" });
    const other = ev(3, {
      type: "part.added",
      message_id: MSG,
      role: "assistant",
      index: 0,
      part: { type: "text", text: "Other" },
    });
    const [started] = [everyKind[1]];
    const viaStream = run(
      [started, other].map((event) => ({ kind: "provisional" as const, event })),
      renewed,
    );
    expect(assistantText(viaStream.runs[RUN].view)).toBe("Other");
    expect(isStale(viaStream.runs[RUN])).toBe(false);
    const viaLog = run(committedItems([started, other]), renewed);
    expect(assistantText(viaLog.runs[RUN].view)).toBe("Other");
    expect(viaLog.runs[RUN].stale).toEqual([]);
    // A discard reaches what was kept too.
    const dropped = reduce(renewed, { type: "item", item: { kind: "discarded", run_id: RUN, after_seq: 2 } });
    expect(assistantText(dropped.runs[RUN].view)).toBe("");
    expect(dropped.runs[RUN].stale.map((e) => e.seq)).toEqual([2]);
  });

  it("keeps what was kept until another execution shows as much, then shows that", () => {
    const renewed = reduce(shown(), { type: "resubscribed" });
    const again = "01a23500-0000-7000-8000-0000000000dd";
    const short = run(
      [
        everyKind[1],
        ev(3, { type: "part.added", message_id: again, role: "assistant", index: 0, part: { type: "text", text: "P" } }),
      ].map((event) => ({ kind: "provisional" as const, event })),
      renewed,
    );
    expect(assistantText(short.runs[RUN].view)).toBe("Pay");
    expect(isStale(short.runs[RUN])).toBe(true);
    expect(short.runs[RUN].diverged).toBe(true);
    // Another drop meanwhile keeps it too.
    const dropped = reduce(short, { type: "resubscribed" });
    expect(assistantText(dropped.runs[RUN].view)).toBe("Pay");
    const longer = run(
      [
        everyKind[1],
        ev(3, { type: "part.added", message_id: again, role: "assistant", index: 0, part: { type: "text", text: "P" } }),
        ev(4, { type: "part.updated", message_id: again, index: 0, update: { type: "text_delta", text: "ayment" } }),
      ].map((event) => ({ kind: "provisional" as const, event })),
      dropped,
    );
    expect(assistantText(longer.runs[RUN].view)).toBe("Payment");
    expect(isStale(longer.runs[RUN])).toBe(false);
    // The run ending shows the log's story whatever its length.
    const ended = run(
      committedItems([
        everyKind[1],
        ev(3, { type: "run.failed", failure: { code: "provider_error", message: "gone" } }),
      ]),
      short,
    );
    expect(ended.runs[RUN].view.status).toBe("failed");
    expect(isStale(ended.runs[RUN])).toBe(false);
  });

  it("never shows less text across any number of dropped connections", () => {
    // The server resends the committed log from the cursor, then the step in flight so far.
    const id = committedLog(slow)[0].run_id;
    fc.assert(
      fc.property(fc.array(fc.boolean(), { minLength: slow.length, maxLength: slow.length }), (drops) => {
        let state = emptyThread;
        let longest = 0;
        const log: RunEvent[] = [];
        let inFlight: RunEvent[] = [];
        const step = (a: Action) => {
          state = reduce(state, a);
          const text = assistantText(state.runs[id]?.view ?? emptyRun);
          expect(text.length).toBeGreaterThanOrEqual(longest);
          longest = text.length;
        };
        slow.forEach((item, i) => {
          if (item.kind === "committed") log.push(item.event);
          if (item.kind === "provisional") inFlight.push(item.event);
          if (item.kind === "confirmed") {
            log.push(...inFlight.filter((e) => e.seq <= item.through_seq));
            inFlight = inFlight.filter((e) => e.seq > item.through_seq);
          }
          step({ type: "item", item });
          if (drops[i]) {
            step({ type: "resubscribed" });
            const from = state.runs[id]?.committedSeq ?? 0;
            for (const event of log.filter((e) => e.seq > from)) step({ type: "item", item: { kind: "committed", event } });
            for (const event of inFlight) step({ type: "item", item: { kind: "provisional", event } });
          }
        });
        expect(state.runs[id].view).toEqual(reference(slow).runs[id].view);
      }),
      { numRuns: 300 },
    );
  });
});

/** The final state of a run streamed whole: the reference every delivery converges to. */
function reference(items: StreamItem[]): ThreadState {
  return run(committedItems(committedLog(items)));
}

/**
 * One way a client might receive `items`: each item delivered once or twice, and at any point a
 * dropped connection — a new subscription (`resubscribed`) and the committed log delivered again
 * from the client's cursor, as the server does for a resubscription.
 */
const delivery = (items: StreamItem[]) =>
  fc
    .array(fc.record({ dup: fc.boolean(), drop: fc.boolean() }), {
      minLength: items.length,
      maxLength: items.length,
    })
    .map((plan) => plan);

function deliver(items: StreamItem[], plan: { dup: boolean; drop: boolean }[]): ThreadState {
  const log = committedLog(items);
  const id = log[0].run_id;
  let state = emptyThread;
  // How far the server's log had got when item i was sent.
  let committedSoFar = 0;
  const resubscribe = () => {
    state = reduce(state, { type: "resubscribed" });
    const from = state.runs[id]?.committedSeq ?? 0;
    for (const e of log.filter((e) => e.seq > from && e.seq <= committedSoFar)) {
      state = reduce(state, { type: "item", item: { kind: "committed", event: e } });
    }
  };
  const apply = (a: Action) => {
    state = reduce(state, a);
    // A client that sees a gap resubscribes from its cursor.
    if (hasGap(state)) resubscribe();
  };
  items.forEach((item, i) => {
    if (item.kind === "committed") committedSoFar = Math.max(committedSoFar, item.event.seq);
    if (item.kind === "confirmed") committedSoFar = Math.max(committedSoFar, item.through_seq);
    apply({ type: "item", item });
    if (plan[i].dup) apply({ type: "item", item });
    if (plan[i].drop) resubscribe();
  });
  // The last subscription reads the log to its end.
  committedSoFar = log[log.length - 1].seq;
  resubscribe();
  return state;
}

describe("convergence", () => {
  for (const [name, items] of [
    ["calculator", calculator],
    ["slow streaming", slow],
  ] as const) {
    it(`any split or duplication of the ${name} stream converges to the committed history`, () => {
      const want = reference(items);
      const id = committedLog(items)[0].run_id;
      fc.assert(
        fc.property(delivery(items), (plan) => {
          const got = deliver(items, plan);
          expect(got.runs[id].view).toEqual(want.runs[id].view);
          expect(got.runs[id].committedSeq).toBe(want.runs[id].committedSeq);
          expect(got.runs[id].provisional).toEqual([]);
          expect(got.runs[id].stale).toEqual([]);
          expect(assistantText(got.runs[id].view)).toBe(assistantText(want.runs[id].view));
        }),
        { numRuns: 300 },
      );
    });
  }

  it("the recorded stream as delivered equals its committed history", () => {
    for (const items of [calculator, slow]) {
      const id = committedLog(items)[0].run_id;
      expect(run(items).runs[id].view).toEqual(reference(items).runs[id].view);
    }
    expect(assistantText(reference(calculator).runs[committedLog(calculator)[0].run_id].view)).toContain(
      "84",
    );
  });
});

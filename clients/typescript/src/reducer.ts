// The view model of a thread's runs, folded from their stream items by one pure reducer:
// `reduce(state, action) → state`, never mutating its input.
//
// Each run keeps the committed log it has applied (`committedSeq`, `base`: the fold of it) and
// the provisional suffix of the step in flight (`provisional`, `view`: the fold of both). A
// committed event at or below `committedSeq` changes nothing (replays are idempotent); one past
// `committedSeq + 1` is a gap: it is not applied, the run is marked, and the client resubscribes
// from `committedSeq`. Provisional events are confirmed by `confirmed` and dropped by
// `discarded`. On `resubscribed` (a new subscription starts from the committed cursor) they stay
// on screen as `stale`: the new subscription's events confirm them one by one as they arrive
// again; when they differ (the step is executed again) the new execution replaces what was kept
// once it shows as much (as much text, a later step, a wait or an end) — so a dropped
// connection or a restarted worker never blanks what was shown, and the log still decides.

import type {
  ApprovalPreview,
  CitationPart,
  InteractionId,
  JsonValue,
  MessageId,
  Part,
  PartUpdate,
  Role,
  RunEvent,
  RunFailure,
  RunId,
  StreamItem,
  Usage,
} from "./generated/wire";

/** A run's state as its events tell it. */
export type RunStatus =
  | "queued"
  | "running"
  | "waiting-approval"
  | "waiting-question"
  | "completed"
  | "failed"
  | "cancelled";

/** A part as shown: the part, and a tool call's input while it still streams. */
export type PartView = Part & { streamedInput?: string };

/** One message of a run. */
export interface MessageView {
  id: MessageId;
  role: Role;
  parts: PartView[];
}

/** An approval the run asked for. */
export interface ApprovalView {
  interactionId: InteractionId;
  toolCallId: string;
  toolName: string;
  inputHash: string;
  /** What the call will do in the application's terms, when its tool has a previewer. */
  preview: ApprovalPreview | null;
}

/** A question the run asked. */
export interface QuestionView {
  interactionId: InteractionId;
  prompt: string;
  answerSchema: JsonValue;
}

/** Everything one run shows. */
export interface RunModel {
  status: RunStatus;
  agent: string | null;
  model: string | null;
  steps: number;
  queuedBehind: RunId | null;
  messages: MessageView[];
  approvals: ApprovalView[];
  questions: QuestionView[];
  citations: CitationPart[];
  usage: Usage | null;
  failure: RunFailure | null;
  cancelReason: string | null;
  finalText: string | null;
  stateVersion: number | null;
  compactions: number;
}

/** One run's stream as applied. */
export interface RunState {
  runId: RunId;
  committedSeq: number;
  base: RunModel;
  provisional: RunEvent[];
  /**
   * Provisional events shown before the subscription was renewed, not yet delivered again by the
   * new one: still on screen (in `view`), waiting to be confirmed or replaced. `provisional` is
   * a prefix of them while there are any, unless `diverged`.
   */
  stale: RunEvent[];
  /**
   * The new subscription told another story than `stale` (the step was executed again): `view`
   * still shows the stale events until the new ones show as much, then the new ones.
   */
  diverged: boolean;
  view: RunModel;
  /** A committed event arrived past `committedSeq + 1`: resubscribe from `committedSeq`. */
  gap: boolean;
}

/** A thread's runs, in the order first seen. */
export interface ThreadState {
  runs: Record<RunId, RunState>;
  order: RunId[];
}

/** What the reducer folds. */
export type Action =
  | { type: "item"; item: StreamItem }
  | { type: "resubscribed" };

export const emptyThread: ThreadState = { runs: {}, order: [] };

export const emptyRun: RunModel = {
  status: "queued",
  agent: null,
  model: null,
  steps: 0,
  queuedBehind: null,
  messages: [],
  approvals: [],
  questions: [],
  citations: [],
  usage: null,
  failure: null,
  cancelReason: null,
  finalText: null,
  stateVersion: null,
  compactions: 0,
};

function assertNever(x: never): never {
  throw new Error(`unexpected ${JSON.stringify(x)}`);
}

function applyUpdate(part: PartView, update: PartUpdate): PartView {
  switch (update.type) {
    case "text_delta":
      return part.type === "text" ? { ...part, text: part.text + update.text } : part;
    case "input_delta":
      return part.type === "tool_call"
        ? { ...part, streamedInput: (part.streamedInput ?? "") + update.json }
        : part;
    case "replaced":
      return update.part;
    default:
      return assertNever(update);
  }
}

function withMessage(
  messages: MessageView[],
  id: MessageId,
  role: Role,
  change: (m: MessageView) => MessageView,
): MessageView[] {
  const i = messages.findIndex((m) => m.id === id);
  if (i < 0) return [...messages, change({ id, role, parts: [] })];
  const next = messages.slice();
  next[i] = change(messages[i]);
  return next;
}

/** One event applied to a run's model. Exhaustive: a new kind of event is a type error here. */
export function applyEvent(model: RunModel, event: RunEvent): RunModel {
  switch (event.type) {
    case "run.queued":
      return { ...model, status: "queued", queuedBehind: event.behind };
    case "run.started":
      return {
        ...model,
        status: "running",
        agent: `${event.agent.name}@${event.agent.version}`,
        model: event.model,
        queuedBehind: null,
      };
    case "step.started":
      return { ...model, status: "running", steps: Math.max(model.steps, event.step) };
    case "part.added": {
      const { part } = event;
      const citations = part.type === "citation" ? [...model.citations, part] : model.citations;
      return {
        ...model,
        citations,
        messages: withMessage(model.messages, event.message_id, event.role, (m) => {
          const parts = m.parts.slice();
          parts[event.index] = part;
          return { ...m, parts };
        }),
      };
    }
    case "part.updated": {
      const i = model.messages.findIndex((m) => m.id === event.message_id);
      const message = model.messages[i];
      const part = message?.parts[event.index];
      if (!message || !part) return model;
      const parts = message.parts.slice();
      parts[event.index] = applyUpdate(part, event.update);
      const messages = model.messages.slice();
      messages[i] = { ...message, parts };
      return { ...model, messages };
    }
    case "usage.updated":
      return { ...model, usage: event.total };
    case "approval.requested":
      return {
        ...model,
        status: "waiting-approval",
        approvals: [
          ...model.approvals.filter((a) => a.interactionId !== event.interaction_id),
          {
            interactionId: event.interaction_id,
            toolCallId: event.tool_call_id,
            toolName: event.tool_name,
            inputHash: event.input_hash,
            preview: event.preview ?? null,
          },
        ],
      };
    case "question.requested":
      return {
        ...model,
        status: model.status === "waiting-approval" ? model.status : "waiting-question",
        questions: [
          ...model.questions.filter((q) => q.interactionId !== event.interaction_id),
          {
            interactionId: event.interaction_id,
            prompt: event.prompt,
            answerSchema: event.answer_schema,
          },
        ],
      };
    case "state.updated":
      return { ...model, stateVersion: event.version };
    case "thread.compacted":
      return { ...model, compactions: model.compactions + 1 };
    case "run.checkpointed":
      return { ...model, steps: Math.max(model.steps, event.step) };
    case "run.completed":
      return { ...model, status: "completed", finalText: event.text, usage: event.usage };
    case "run.failed":
      return { ...model, status: "failed", failure: event.failure };
    case "run.cancelled":
      return { ...model, status: "cancelled", cancelReason: event.reason ?? null };
    default:
      return assertNever(event);
  }
}

function fold(model: RunModel, events: RunEvent[]): RunModel {
  return events.reduce(applyEvent, model);
}

function runOf(state: ThreadState, runId: RunId): RunState {
  return (
    state.runs[runId] ?? {
      runId,
      committedSeq: 0,
      base: emptyRun,
      provisional: [],
      stale: [],
      diverged: false,
      view: emptyRun,
      gap: false,
    }
  );
}

function put(state: ThreadState, run: RunState): ThreadState {
  const known = run.runId in state.runs;
  return {
    runs: { ...state.runs, [run.runId]: run },
    order: known ? state.order : [...state.order, run.runId],
  };
}

function sameEvent(a: RunEvent, b: RunEvent): boolean {
  return JSON.stringify(a) === JSON.stringify(b);
}

function textLength(model: RunModel): number {
  let n = 0;
  for (const m of model.messages) {
    if (m.role !== "assistant") continue;
    for (const p of m.parts) if (p?.type === "text") n += p.text.length;
  }
  return n;
}

/**
 * A run whose new execution diverged from what was kept: shown as the new events tell it once
 * they show as much as what was kept (as much text, a later step, a wait or an end), else as
 * it was.
 */
function settle(run: RunState): RunState {
  if (!run.diverged) return run;
  const fresh = fold(run.base, run.provisional);
  const shown = run.view;
  const caughtUp =
    textLength(fresh) >= textLength(shown) ||
    fresh.steps > shown.steps ||
    !["queued", "running"].includes(fresh.status);
  return caughtUp ? { ...run, stale: [], diverged: false, view: fresh } : run;
}

function committed(run: RunState, event: RunEvent): RunState {
  if (event.seq <= run.committedSeq) return run;
  if (event.seq > run.committedSeq + 1) return run.gap ? run : { ...run, gap: true };
  const base = applyEvent(run.base, event);
  const shown = run.provisional[0] ?? (run.diverged ? undefined : run.stale[0]);
  if (shown && shown.seq === event.seq && sameEvent(shown, event)) {
    // The commit confirms what was shown: the view already holds it.
    return {
      ...run,
      committedSeq: event.seq,
      base,
      provisional: run.provisional.slice(1),
      stale: run.diverged ? run.stale : run.stale.slice(1),
      gap: false,
    };
  }
  if (run.stale.length > 0) {
    // Another execution's commit: it replaces what was kept once it shows as much.
    return settle({ ...run, committedSeq: event.seq, base, provisional: [], diverged: true, gap: false });
  }
  // Provisional events that disagree with the log (an execution since replaced) are dropped:
  // the log decides.
  return { ...run, committedSeq: event.seq, base, provisional: [], view: base, gap: false };
}

function provisional(run: RunState, event: RunEvent): RunState {
  const last = run.provisional.at(-1)?.seq ?? run.committedSeq;
  if (event.seq <= last) return run;
  if (event.seq !== last + 1) {
    // A lost live message: show the committed state and wait for the commit.
    return { ...run, provisional: [], stale: [], diverged: false, view: run.base };
  }
  const events = [...run.provisional, event];
  if (run.stale.length > 0) {
    const before = run.diverged ? undefined : run.stale[run.provisional.length];
    if (before && sameEvent(before, event)) {
      // Delivered again as it was shown: the view already holds it.
      return { ...run, provisional: events, stale: events.length < run.stale.length ? run.stale : [] };
    }
    // The new subscription tells another story (the step was executed again).
    return settle({ ...run, provisional: events, diverged: true });
  }
  return { ...run, provisional: events, view: applyEvent(run.view, event) };
}

function confirm(run: RunState, through: number): RunState {
  const now = run.provisional.filter((e) => e.seq <= through);
  if (!now.length) return run;
  if (now[0].seq !== run.committedSeq + 1) return run;
  const last = now[now.length - 1].seq;
  return {
    ...run,
    committedSeq: last,
    base: fold(run.base, now),
    provisional: run.provisional.filter((e) => e.seq > through),
    stale: run.diverged ? run.stale : run.stale.filter((e) => e.seq > through),
  };
}

function discard(run: RunState, after: number): RunState {
  const kept = run.provisional.filter((e) => e.seq <= after);
  if (run.diverged) {
    return kept.length === run.provisional.length ? run : settle({ ...run, provisional: kept });
  }
  const stale = run.stale.filter((e) => e.seq <= after);
  if (kept.length === run.provisional.length && stale.length === run.stale.length) return run;
  const shown = stale.length > kept.length ? stale : kept;
  return { ...run, provisional: kept, stale: stale.length > kept.length ? stale : [], view: fold(run.base, shown) };
}

/** The reducer. */
export function reduce(state: ThreadState, action: Action): ThreadState {
  if (action.type === "resubscribed") {
    let next = state;
    for (const id of state.order) {
      const run = state.runs[id];
      if (run.provisional.length || run.gap) {
        // What was shown stays shown (`provisional` is a prefix of `stale` while there is one,
        // or the view still shows `stale` if they diverged).
        const stale = run.stale.length ? run.stale : run.provisional;
        next = put(next, { ...run, provisional: [], stale, gap: false });
      }
    }
    return next;
  }
  const { item } = action;
  switch (item.kind) {
    case "committed": {
      const run = runOf(state, item.event.run_id);
      const next = committed(run, item.event);
      return next === run && run.runId in state.runs ? state : put(state, next);
    }
    case "provisional": {
      const run = runOf(state, item.event.run_id);
      const next = provisional(run, item.event);
      return next === run && run.runId in state.runs ? state : put(state, next);
    }
    case "confirmed": {
      const run = state.runs[item.run_id];
      if (!run) return state;
      const next = confirm(run, item.through_seq);
      return next === run ? state : put(state, next);
    }
    case "discarded": {
      const run = state.runs[item.run_id];
      if (!run) return state;
      const next = discard(run, item.after_seq);
      return next === run ? state : put(state, next);
    }
    default:
      return assertNever(item);
  }
}

/** The cursors to resubscribe with: each run's last committed sequence number. */
export function cursors(state: ThreadState): { runId: RunId; seq: number }[] {
  return state.order.map((runId) => ({ runId, seq: state.runs[runId].committedSeq }));
}

/** Whether a run still shows events from before a reconnect, not yet delivered again. */
export function isStale(run: RunState): boolean {
  return run.stale.length > 0;
}

/** Whether any run saw a gap (the subscription must start again from the cursors). */
export function hasGap(state: ThreadState): boolean {
  return state.order.some((id) => state.runs[id].gap);
}

/** The assistant's text of a run, every text part joined. */
export function assistantText(model: RunModel): string {
  return model.messages
    .filter((m) => m.role === "assistant")
    .flatMap((m) => m.parts)
    .map((p) => (p.type === "text" ? p.text : ""))
    .filter((t) => t.length > 0)
    .join("\n");
}

/** The tool call a call id names, with its result when there is one. */
export function toolCall(
  model: RunModel,
  toolCallId: string,
): { call: PartView | null; result: PartView | null } {
  let call: PartView | null = null;
  let result: PartView | null = null;
  for (const m of model.messages) {
    for (const p of m.parts) {
      if (p.type === "tool_call" && p.tool_call_id === toolCallId) call = p;
      if (p.type === "tool_result" && p.tool_call_id === toolCallId) result = p;
    }
  }
  return { call, result };
}

import { useState } from "react";

import { type CitationPart, type PartView, type RunModel, type RunStatus, toolCall } from "@forge/client";

import { cut, money } from "../text";
import { CitationDialog } from "./Citation";
import { ApprovalCard, QuestionForm } from "./Interactions";

const STATUS: Record<RunStatus, string> = {
  queued: "Queued",
  running: "Running",
  "waiting-approval": "Waiting for approval",
  "waiting-question": "Waiting for an answer",
  completed: "Completed",
  failed: "Failed",
  cancelled: "Cancelled",
};

const ENDED: RunStatus[] = ["completed", "failed", "cancelled"];

/** What the API says of a run beside its events: its cost. */
export interface RunMeta {
  id: string;
  agentName: string;
  createdAt: string;
  costMicros: number;
  /** The ISO code of `costMicros`'s unit. */
  currency: string;
  /** The API's status: `queued` when no worker has taken it up yet (nothing streamed then). */
  status: string;
  /** Whether someone asked to cancel it. */
  cancelRequested: boolean;
  /** The message that started the run: its text parts (other parts as their type name). */
  input: ({ __typename: "TextPart"; text: string } | { __typename: string; text?: undefined })[];
}

function Part({ part, model }: { part: PartView; model: RunModel }) {
  switch (part.type) {
    case "text":
      return part.text ? <p className="text">{part.text}</p> : null;
    case "tool_call": {
      const { result } = toolCall(model, part.tool_call_id);
      return (
        <details className="tool" open={!result}>
          <summary>
            Tool <code>{part.tool_name}</code>
            {result && result.type === "tool_result" ? (result.is_error ? " · failed" : " · done") : " · …"}
          </summary>
          <pre className="json">
            {part.input === null && part.streamedInput
              ? part.streamedInput
              : JSON.stringify(part.input, null, 2)}
          </pre>
          {result && result.type === "tool_result" && (
            <pre className={result.is_error ? "json error" : "json"}>
              {JSON.stringify(result.output, null, 2)}
            </pre>
          )}
        </details>
      );
    }
    case "structured_output":
      return <pre className="json structured">{JSON.stringify(part.value, null, 2)}</pre>;
    case "error":
      return (
        <p className="error">
          {part.message} <code>{part.code}</code>
        </p>
      );
    case "file":
      return (
        <p className="muted">
          File {part.name} ({part.media_type}, {part.size_bytes} bytes)
        </p>
      );
    case "tool_result":
    case "approval":
    case "question":
    case "citation":
      // Shown beside their call, as cards, and as citations.
      return null;
  }
}

/** What the footer says of cost: nothing is counted until a step completes. */
function cost(meta: RunMeta | undefined, ended: boolean): string {
  if (!meta) return "";
  if (meta.costMicros === 0 && !ended) return " · cost counted as each step completes";
  return ` · cost ${money(meta.costMicros, meta.currency)}`;
}

export function RunCard({
  model,
  meta,
  userText,
  pendingIds,
  stale,
  cancelling,
  onCancel,
}: {
  model: RunModel;
  meta: RunMeta | undefined;
  userText: string | undefined;
  pendingIds: Set<string>;
  /** What is shown arrived before the connection dropped and is not confirmed again yet. */
  stale: boolean;
  /** A cancel was asked for and the run has not ended yet. */
  cancelling: boolean;
  onCancel: () => void;
}) {
  const [open, setOpen] = useState<CitationPart | null>(null);
  const ended = ENDED.includes(model.status);
  const usage = model.usage;
  const agent = meta?.agentName ?? model.agent?.split("@")[0] ?? "…";
  const status = cancelling && !ended ? "Cancelling…" : STATUS[model.status];
  return (
    <article className={`run ${model.status}${stale ? " stale" : ""}`} aria-label={`Run ${agent}`}>
      <header className="row">
        <span className={`badge ${model.status}`} role="status">
          {status}
        </span>
        <h2 className="run-agent">{agent}</h2>
        {!ended &&
          (cancelling ? (
            <span className="muted">
              {model.status === "queued" || model.status.startsWith("waiting")
                ? "It stops when a worker next takes it up."
                : "Stopping…"}
            </span>
          ) : (
            <button type="button" className="link" onClick={onCancel}>
              Cancel
            </button>
          ))}
        {stale && (
          <span className="muted stale-note" role="status">
            Reconnecting: showing what arrived before the connection dropped
          </span>
        )}
      </header>
      {model.status === "queued" && !cancelling && (
        <p className="muted">
          {model.queuedBehind ? "Waiting for the run before it on this thread to end." : "Waiting for a worker to take it up."}
        </p>
      )}
      {userText && <p className="user">{userText}</p>}
      {model.messages
        .filter((m) => m.role === "assistant")
        .map((m) => (
          <div key={m.id} className="assistant">
            {m.parts.map((p, i) => (p ? <Part key={i} part={p} model={model} /> : null))}
          </div>
        ))}
      {model.approvals.map((a) => {
        const { call, result } = toolCall(model, a.toolCallId);
        return (
          <ApprovalCard
            key={a.interactionId}
            approval={a}
            input={call && call.type === "tool_call" ? call.input : undefined}
            mayDecide={pendingIds.has(a.interactionId)}
            decided={result !== null || (model.status !== "waiting-approval" && !pendingIds.has(a.interactionId))}
          />
        );
      })}
      {model.status === "waiting-question" &&
        model.questions.map((q) => <QuestionForm key={q.interactionId} question={q} />)}
      {model.citations.length > 0 && (
        <nav aria-label="Sources" className="citations">
          <h3>Sources</h3>
          <ol>
            {model.citations.map((c, i) => (
              <li key={i}>
                <button type="button" className="link" onClick={() => setOpen(c)}>
                  {c.source_id}: “{cut(c.excerpt, 61)}”
                </button>
              </li>
            ))}
          </ol>
        </nav>
      )}
      {model.failure && (
        <p role="alert" className="error">
          {model.failure.message} <code>{model.failure.code}</code>
        </p>
      )}
      {model.status === "cancelled" && (
        <p className="muted">Cancelled{model.cancelReason ? `: ${model.cancelReason}` : "."}</p>
      )}
      <footer className="muted usage">
        {usage ? `${usage.input_tokens} tokens in, ${usage.output_tokens} out` : "No model calls yet"}
        {cost(meta, ended)}
      </footer>
      {open && <CitationDialog citation={open} onClose={() => setOpen(null)} />}
    </article>
  );
}

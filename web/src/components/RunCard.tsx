import { useEffect, useRef, useState } from "react";

import { type CitationPart, type PartView, type RunModel, type RunStatus, toolCall } from "@forge/client";

import { describe, gql } from "../api";
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
  /** The message that started the run: its text parts (other parts as their type name). */
  input: ({ __typename: "TextPart"; text: string } | { __typename: string; text?: undefined })[];
}

function CitationDialog({ citation, onClose }: { citation: CitationPart; onClose: () => void }) {
  const ref = useRef<HTMLDialogElement>(null);
  const [text, setText] = useState<{ title: string; text: string } | null>(null);
  const [error, setError] = useState<string | null>(null);
  useEffect(() => {
    ref.current?.showModal();
    let live = true;
    gql<{ resolveCitation: { title: string; text: string } }>(
      `query Cite($s: String!, $v: String!, $a: Int!, $b: Int!) {
        resolveCitation(sourceId: $s, version: $v, start: $a, end: $b) { title text }
      }`,
      { s: citation.source_id, v: citation.source_version, a: citation.span.start, b: citation.span.end },
    )
      .then((r) => live && setText(r.resolveCitation))
      .catch((e) => live && setError(describe(e)));
    return () => {
      live = false;
    };
  }, [citation]);
  return (
    <dialog ref={ref} onClose={onClose} aria-labelledby="citation-title" className="citation-dialog">
      <h3 id="citation-title">{text?.title ?? citation.source_id}</h3>
      <p className="muted">
        {citation.source_id}, bytes {citation.span.start}–{citation.span.end}
        {citation.line ? `, line ${citation.line}` : ""}
      </p>
      {text ? (
        <blockquote className="span">{text.text}</blockquote>
      ) : error ? (
        <p role="alert" className="error">
          The source is no longer available to you ({error})
        </p>
      ) : (
        <p className="muted">Loading the passage…</p>
      )}
      <form method="dialog">
        <button type="submit">Close</button>
      </form>
    </dialog>
  );
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

export function RunCard({
  model,
  meta,
  userText,
  pendingIds,
  onCancel,
}: {
  model: RunModel;
  meta: RunMeta | undefined;
  userText: string | undefined;
  pendingIds: Set<string>;
  onCancel: () => void;
}) {
  const [open, setOpen] = useState<CitationPart | null>(null);
  const ended = ENDED.includes(model.status);
  const usage = model.usage;
  return (
    <article className={`run ${model.status}`} aria-label={`Run ${meta?.agentName ?? model.agent ?? ""}`}>
      <header className="row">
        <span className={`badge ${model.status}`}>{STATUS[model.status]}</span>
        <span className="muted">{meta?.agentName ?? model.agent ?? "…"}</span>
        {!ended && (
          <button type="button" className="link" onClick={onCancel}>
            Cancel
          </button>
        )}
      </header>
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
          <h4>Sources</h4>
          <ol>
            {model.citations.map((c, i) => (
              <li key={i}>
                <button type="button" className="link" onClick={() => setOpen(c)}>
                  {c.source_id}: “{c.excerpt.length > 60 ? `${c.excerpt.slice(0, 60)}…` : c.excerpt}”
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
      <footer className="muted usage">
        {usage ? `${usage.input_tokens} tokens in, ${usage.output_tokens} out` : "No model calls yet"}
        {meta ? ` · cost ${(meta.costMicros / 1_000_000).toFixed(6)}` : ""}
      </footer>
      {open && <CitationDialog citation={open} onClose={() => setOpen(null)} />}
    </article>
  );
}

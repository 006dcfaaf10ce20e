// One run as its log tells it: what it is (state, agent, cost reserved and settled, its trace),
// the time each step took (a waterfall from the run's own events, with the model's latency and
// time to first token), its model calls (attempts and the worker of each, takeovers marked),
// the approvals and questions with who decided and when, and every event in order (a citation
// opens its exact span).

import type { CitationPart } from "@forge/client";
import { useMemo, useState } from "react";

import { gql } from "../api";
import { CitationDialog } from "../components/Citation";
import { cut, money, summarize } from "../text";
import { Go, Scroll, ShortId, States, When, useLoad } from "./common";
import { type Event, stepTimes, steps } from "./timing";


interface ModelCall {
  step: number;
  attempt: number;
  /** The lease holder whose execution made it (absent on calls recorded before it was kept). */
  holder?: string;
  /** The trace its execution ran in (absent without tracing). */
  trace_id?: string;
  model: string;
  at: string;
  estimated_cost_micros: number;
  cost_micros: number | null;
  actual: { input_tokens: number; output_tokens: number } | null;
}

interface Interaction {
  id: string;
  kind: string;
  status: string;
  request: Record<string, unknown>;
  resolution: { decision?: unknown; actor?: string; at?: string } | null;
}

interface Inspected {
  run: {
    id: string;
    threadId: string;
    status: string;
    agentName: string;
    agentVersion: string;
    steps: number;
    createdAt: string;
    costMicros: number;
    currency: string;
    failure: { code?: string; message?: string } | null;
    tokens: { inputTokens: number; outputTokens: number };
    events: Event[];
    interactions: Interaction[];
    modelCalls: ModelCall[];
  };
}

const INSPECT = `query Inspect($id: ID!) {
  run(id: $id) {
    id threadId status agentName agentVersion steps createdAt costMicros currency failure
    tokens { inputTokens outputTokens }
    events(limit: 500) { seq at type event }
    interactions { id kind status request resolution }
    modelCalls
  }
}`;

/** A row of the timeline: one event, or a run of streamed chunks folded into one. */
interface Row {
  seq: number;
  last: number;
  at: string;
  type: string;
  what: string;
  /** The citation a `part.added` event added, which the row opens. */
  citation?: CitationPart;
}

/** One line saying what an event did, for people (content cut short; it is as redacted as stored). */
export function summary(e: Event): string {
  const x = e.event;
  const part = x.part as Record<string, unknown> | undefined;
  switch (e.type) {
    case "run.started": {
      const agent = x.agent as { name?: string; version?: string } | undefined;
      return `${agent?.name ?? ""} v${agent?.version ?? ""} on ${String(x.model ?? "")}`;
    }
    case "run.queued":
      return x.behind ? "behind another run of the thread" : "waiting for a worker";
    case "step.started":
    case "run.checkpointed":
      return `step ${String(x.step)}`;
    case "part.added":
      if (!part) return "";
      switch (part.type) {
        case "text":
          return `${String(x.role)} text: “${cut(String(part.text ?? ""), 80)}”`;
        case "tool_call":
          return `call ${String(part.tool_name)}(${summarize(part.input)})`;
        case "tool_result":
          return `${part.is_error ? "failed" : "result"}: ${cut(JSON.stringify(part.output ?? null), 80)}`;
        case "citation":
          return `cites ${String(part.source_id)} bytes ${String((part.span as { start?: number })?.start)}–${String((part.span as { end?: number })?.end)}`;
        default:
          return `${String(x.role)} ${String(part.type)}`;
      }
    case "usage.updated": {
      const t = x.total as { input_tokens?: number; output_tokens?: number } | undefined;
      return `${t?.input_tokens ?? 0} tokens in, ${t?.output_tokens ?? 0} out so far`;
    }
    case "approval.requested":
      return `approval of ${String(x.tool_name)} asked`;
    case "question.requested":
      return `asked: “${cut(String(x.prompt ?? ""), 80)}”`;
    case "state.updated":
      return `session state version ${String(x.version)}`;
    case "thread.compacted":
      return "the thread's history was compacted";
    case "run.completed":
      return "completed";
    case "run.failed": {
      const f = x.failure as { code?: string; message?: string } | undefined;
      return `failed (${f?.code ?? "?"}): ${cut(f?.message ?? "", 160)}`;
    }
    case "run.cancelled":
      return `cancelled${x.reason ? `: ${String(x.reason)}` : ""}`;
    default:
      return "";
  }
}

/** The timeline's rows: consecutive streamed chunks of a part fold into one. */
export function rows(events: Event[]): Row[] {
  const out: Row[] = [];
  for (const e of events) {
    const prev = out[out.length - 1];
    if (e.type === "part.updated" && prev && prev.type === "part.updated") {
      prev.last = e.seq;
      prev.what = `${prev.last - prev.seq + 1} streamed chunks`;
      continue;
    }
    const part = e.event.part as { type?: string } | undefined;
    out.push({
      seq: e.seq,
      last: e.seq,
      at: e.at,
      type: e.type,
      what: e.type === "part.updated" ? "1 streamed chunk" : summary(e),
      citation: e.type === "part.added" && part?.type === "citation" ? (part as unknown as CitationPart) : undefined,
    });
  }
  return out;
}

function seconds(ms: number): string {
  return `${(ms / 1000).toFixed(ms < 10_000 ? 2 : 1)} s`;
}

export function RunInspector({ id }: { id: string }) {
  const { value, error, loading } = useLoad(() => gql<Inspected>(INSPECT, { id }), [id]);
  const run = value?.run;
  const [cited, setCited] = useState<CitationPart | null>(null);
  const timeline = useMemo(() => rows(run?.events ?? []), [run]);
  const spans = useMemo(() => steps(run?.events ?? []), [run]);
  const timings = useMemo(() => stepTimes(run?.events ?? []), [run]);
  const traces = [...new Set((run?.modelCalls ?? []).flatMap((c) => (c.trace_id ? [c.trace_id] : [])))];
  const t0 = run?.events.length ? new Date(run.events[0].at).getTime() : 0;
  const total = spans.length ? Math.max(1, spans[spans.length - 1].end - spans[0].start) : 1;
  const reserved = run?.modelCalls.reduce((n, c) => n + c.estimated_cost_micros, 0) ?? 0;

  return (
    <section aria-labelledby="run-heading">
      <p>
        <Go to="/console/runs">← All runs</Go>
      </p>
      <h2 id="run-heading">
        Run <ShortId id={id} />
      </h2>
      <States loading={loading} error={error} empty={!run} what="the run" />
      {run && (
        <>
          <dl className="facts summary">
            <div>
              <dt>State</dt>
              <dd>
                <span className={`badge ${run.status}`}>{run.status}</span>
                {run.failure ? ` ${run.failure.code ?? ""}: ${run.failure.message ?? ""}` : ""}
              </dd>
            </div>
            <div>
              <dt>Agent</dt>
              <dd>
                {run.agentName} v{run.agentVersion}
              </dd>
            </div>
            <div>
              <dt>Thread</dt>
              <dd>
                <Go to={`/threads/${run.threadId}`}>
                  <ShortId id={run.threadId} />
                </Go>
              </dd>
            </div>
            <div>
              <dt>Started</dt>
              <dd>
                <When at={run.createdAt} />
              </dd>
            </div>
            <div>
              <dt>Tokens</dt>
              <dd>
                {run.tokens.inputTokens} in, {run.tokens.outputTokens} out
              </dd>
            </div>
            <div>
              <dt>Trace</dt>
              <dd className="trace">
                {traces.length === 0
                  ? "none recorded (no tracing when it ran)"
                  : traces.map((t) => (
                      <code key={t} title="The trace id to open in your tracing tool">
                        {t}
                      </code>
                    ))}
              </dd>
            </div>
            <div>
              <dt>Cost</dt>
              <dd>
                {money(run.costMicros, run.currency)} settled, {money(reserved, run.currency)} reserved
              </dd>
            </div>
          </dl>

          <h3>Time per step</h3>
          {spans.length === 0 ? (
            <p className="muted">No step has started.</p>
          ) : (
            <ol className="waterfall">
              {spans.map((s) => (
                <li key={s.step}>
                  <span className="label">
                    Step {s.step}: {seconds(s.end - s.start)}
                    {timings.get(s.step)?.model !== undefined ? (
                      <span className="muted">
                        {" "}
                        (model {seconds(timings.get(s.step)?.model ?? 0)}
                        {timings.get(s.step)?.firstToken !== undefined
                          ? `, first token after ${seconds(timings.get(s.step)?.firstToken ?? 0)}`
                          : ""}
                        )
                      </span>
                    ) : null}
                  </span>
                  <span
                    className="bar"
                    aria-hidden="true"
                    style={{
                      marginLeft: `${((s.start - spans[0].start) / total) * 100}%`,
                      width: `${Math.max(0.5, ((s.end - s.start) / total) * 100)}%`,
                    }}
                  />
                </li>
              ))}
            </ol>
          )}

          <h3>Model calls</h3>
          {run.modelCalls.length === 0 ? (
            <p className="muted">No model call was metered.</p>
          ) : (
            <Scroll label="Model calls table">
              <table className="data">
                <thead>
                  <tr>
                    <th scope="col">Step</th>
                    <th scope="col">Attempt</th>
                    <th scope="col">Worker</th>
                    <th scope="col">Model</th>
                    <th scope="col">At</th>
                    <th scope="col">Tokens in / out</th>
                    <th scope="col">Reserved</th>
                    <th scope="col">Settled</th>
                  </tr>
                </thead>
                <tbody>
                  {run.modelCalls.map((c, i) => (
                    <tr key={i}>
                      <td className="num">{c.step}</td>
                      <td className="num">{c.attempt}</td>
                      <td>
                        {c.holder ?? "—"}
                        {i > 0 && c.holder && run.modelCalls[i - 1].holder && run.modelCalls[i - 1].holder !== c.holder ? (
                          <strong className="takeover"> took over</strong>
                        ) : null}
                      </td>
                      <td>{c.model}</td>
                      <td>
                        <When at={c.at} />
                      </td>
                      <td className="num">{c.actual ? `${c.actual.input_tokens} / ${c.actual.output_tokens}` : "—"}</td>
                      <td className="num">{money(c.estimated_cost_micros, run.currency)}</td>
                      <td className="num">{c.cost_micros === null ? "not settled" : money(c.cost_micros, run.currency)}</td>
                    </tr>
                  ))}
                </tbody>
              </table>
            </Scroll>
          )}

          <h3>Approvals and questions</h3>
          {run.interactions.length === 0 ? (
            <p className="muted">None asked.</p>
          ) : (
            <ul className="plain interactions">
              {run.interactions.map((i) => (
                <li key={i.id}>
                  {i.kind === "approval"
                    ? `Approval of ${String(i.request.tool_name ?? "a tool call")} (${summarize(i.request.input)})`
                    : `Question: ${String(i.request.prompt ?? "")}`}{" "}
                  — {i.status}
                  {i.resolution && (
                    <>
                      : {JSON.stringify(i.resolution.decision)} by <strong>{i.resolution.actor}</strong>
                      {i.resolution.at ? (
                        <>
                          {" "}
                          at <When at={i.resolution.at} />
                        </>
                      ) : null}
                    </>
                  )}
                </li>
              ))}
            </ul>
          )}

          <h3>Events</h3>
          <Scroll label="Events table">
            <table className="data timeline">
              <thead>
                <tr>
                  <th scope="col">Seq</th>
                  <th scope="col">After</th>
                  <th scope="col">Event</th>
                  <th scope="col">What</th>
                </tr>
              </thead>
              <tbody>
                {timeline.map((r) => (
                  <tr key={r.seq} className={r.type.replace(".", "-")}>
                    <td className="num">{r.last === r.seq ? r.seq : `${r.seq}–${r.last}`}</td>
                    <td className="num">{seconds(new Date(r.at).getTime() - t0)}</td>
                    <td>
                      <code>{r.type}</code>
                    </td>
                    <td>
                      {r.citation ? (
                        <button type="button" className="link" onClick={() => setCited(r.citation ?? null)}>
                          {r.what}
                        </button>
                      ) : (
                        r.what
                      )}
                    </td>
                  </tr>
                ))}
              </tbody>
            </table>
          </Scroll>
          {run.events.length === 500 && <p className="muted">The first 500 events are shown.</p>}
          {cited ? <CitationDialog citation={cited} onClose={() => setCited(null)} /> : null}
        </>
      )}
    </section>
  );
}

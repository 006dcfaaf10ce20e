// The tenant's runs, newest first: filtered by state, agent and version, thread, creation day
// and failure code (kept in the address bar), a page at a time, refreshed while the screen is open.

import { useEffect, useState } from "react";

import { gql } from "../api";
import { money } from "../text";
import { Go, Scroll, ShortId, States, When, dayStart, useFilterForm, useLoad, useSearch } from "./common";

/** One run as the list shows it. */
export interface RunRow {
  id: string;
  threadId: string;
  status: string;
  agentName: string;
  agentVersion: string;
  steps: number;
  createdAt: string;
  costMicros: number;
  currency: string;
  tokens: { inputTokens: number; outputTokens: number };
  failure: { code?: string; message?: string } | null;
  cancelRequested: boolean;
}

interface Page {
  runs: { nodes: RunRow[]; pageInfo: { hasNextPage: boolean; endCursor: string | null } };
}

const RUNS = `query ConsoleRuns($status: String, $threadId: ID, $agentName: String, $agentVersion: String,
  $since: String, $until: String, $failureCode: String, $after: String) {
  runs(status: $status, threadId: $threadId, agentName: $agentName, agentVersion: $agentVersion,
    since: $since, until: $until, failureCode: $failureCode, after: $after, first: 50) {
    nodes {
      id threadId status agentName agentVersion steps createdAt costMicros currency cancelRequested
      failure tokens { inputTokens outputTokens }
    }
    pageInfo { hasNextPage endCursor }
  }
}`;

const STATES = ["queued", "running", "waiting", "completed", "failed", "cancelled"];

/** The failure codes a run can end with (`FailureCode` on the server). */
const FAILURES = [
  "step_limit_exceeded",
  "provider_error",
  "malformed_model_output",
  "model_unavailable",
  "budget_exceeded",
  "quota_exceeded",
  "agent_version_unavailable",
  "dead_lettered",
  "structured_output_invalid",
  "internal",
];

/** The text fields of the filter form, as in the address bar. */
const FIELDS = ["thread", "agent", "version", "from", "to"] as const;

/** The API's filter for the address bar's `params`. */
export function runFilter(params: URLSearchParams): Record<string, string | undefined> {
  const get = (k: string) => params.get(k)?.trim() || undefined;
  return {
    status: get("status"),
    threadId: get("thread"),
    agentName: get("agent"),
    agentVersion: get("version"),
    // Days are UTC and both included: the API's window ends before the day after `to`.
    since: dayStart(get("from")),
    until: dayStart(get("to"), 1),
    failureCode: get("failure"),
  };
}
/** How often an open list asks again for new runs and changed states. */
const REFRESH_MS = 5_000;

export function Runs({ search }: { search: string }) {
  const [params, setParams] = useSearch(search);
  const status = params.get("status") ?? "";
  const failure = params.get("failure") ?? "";
  const key = params.toString();
  const { field, apply: filter } = useFilterForm(params, setParams, FIELDS);
  const [more, setMore] = useState<RunRow[]>([]);
  const [next, setNext] = useState<string | null>(null);
  const first = useLoad(() => gql<Page>(RUNS, runFilter(params)), [key]);
  useEffect(() => {
    setMore([]);
    setNext(first.value?.runs.pageInfo.hasNextPage ? first.value.runs.pageInfo.endCursor : null);
  }, [first.value]);
  // Live: the first page again every few seconds while the screen is visible.
  useEffect(() => {
    const timer = setInterval(() => {
      if (document.visibilityState === "visible") first.reload();
    }, REFRESH_MS);
    return () => clearInterval(timer);
  }, [first.reload]);

  const loadMore = async () => {
    if (!next) return;
    const page = await gql<Page>(RUNS, { ...runFilter(params), after: next });
    setMore((m) => [...m, ...page.runs.nodes]);
    setNext(page.runs.pageInfo.hasNextPage ? page.runs.pageInfo.endCursor : null);
  };

  const rows = [...(first.value?.runs.nodes ?? []), ...more];

  return (
    <section aria-labelledby="runs-heading">
      <h2 id="runs-heading">Runs</h2>
      <form className="row card filters" onSubmit={filter} aria-label="Filter runs">
        <label htmlFor="run-status">State</label>
        <select id="run-status" value={status} onChange={(e) => setParams({ status: e.target.value || null })}>
          <option value="">Any</option>
          {STATES.map((s) => (
            <option key={s} value={s}>
              {s}
            </option>
          ))}
        </select>
        <label htmlFor="run-failure">Failure</label>
        <select id="run-failure" value={failure} onChange={(e) => setParams({ failure: e.target.value || null })}>
          <option value="">Any</option>
          {FAILURES.map((c) => (
            <option key={c} value={c}>
              {c}
            </option>
          ))}
        </select>
        <label htmlFor="run-agent">Agent</label>
        <input id="run-agent" {...field("agent")} size={14} />
        <label htmlFor="run-version">Version</label>
        <input id="run-version" {...field("version")} size={6} />
        <label htmlFor="run-from">From (UTC day)</label>
        <input id="run-from" type="date" {...field("from")} />
        <label htmlFor="run-to">To (UTC day)</label>
        <input id="run-to" type="date" {...field("to")} />
        <label htmlFor="run-thread">Thread id</label>
        <input id="run-thread" {...field("thread")} size={38} />
        <button type="submit">Filter</button>
      </form>
      <States loading={first.loading} error={first.error} empty={rows.length === 0} what="runs" />
      {rows.length > 0 && (
        <Scroll label="Runs table">
          <table className="data">
            <caption className="visually-hidden">The tenant's runs, newest first</caption>
            <thead>
              <tr>
                <th scope="col">Run</th>
                <th scope="col">State</th>
                <th scope="col">Agent</th>
                <th scope="col">Started</th>
                <th scope="col">Steps</th>
                <th scope="col">Tokens in / out</th>
                <th scope="col">Cost</th>
                <th scope="col">Thread</th>
              </tr>
            </thead>
            <tbody>
              {rows.map((r) => (
                <tr key={r.id}>
                  <td>
                    <Go to={`/console/runs/${r.id}`}>
                      <ShortId id={r.id} />
                    </Go>
                  </td>
                  <td>
                    <span className={`badge ${r.status}`}>{r.status}</span>
                    {r.failure?.code ? <code className="failure-code"> {r.failure.code}</code> : null}
                    {r.cancelRequested && !["cancelled", "completed", "failed"].includes(r.status) ? " (cancelling)" : null}
                  </td>
                  <td>
                    <Go to={`/console/runs?agent=${encodeURIComponent(r.agentName)}&version=${encodeURIComponent(r.agentVersion)}`}>
                      {r.agentName} <span className="muted">v{r.agentVersion}</span>
                    </Go>
                  </td>
                  <td>
                    <When at={r.createdAt} />
                  </td>
                  <td className="num">{r.steps}</td>
                  <td className="num">
                    {r.tokens.inputTokens} / {r.tokens.outputTokens}
                  </td>
                  <td className="num">{money(r.costMicros, r.currency)}</td>
                  <td>
                    <Go to={`/console/runs?thread=${r.threadId}`}>
                      <ShortId id={r.threadId} />
                    </Go>
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </Scroll>
      )}
      {next && (
        <button type="button" onClick={() => void loadMore()}>
          Load older runs
        </button>
      )}
    </section>
  );
}

import { type FormEvent, useCallback, useEffect, useMemo, useRef, useState } from "react";

import { type RunModel, type RunStatus, cursors, emptyRun, hasGap, isStale, newKey } from "@forge/client";

import { ApiError, describe, gql, signInRequired } from "../api";
import { RunCard, type RunMeta } from "../components/RunCard";
import { follow } from "../live";
import { usePending } from "../pending";
import { follow as go, navigate } from "../router";
import { dispatch, threadState, useThread } from "../store";

interface ThreadData {
  thread: {
    id: string;
    title: string | null;
    archivedAt: string | null;
    createdBy: string;
    runs: { nodes: RunMeta[] };
  };
}

const THREAD = `query Thread($id: ID!) {
  thread(id: $id) {
    id title archivedAt createdBy
    runs(first: 100) {
      nodes {
        id agentName createdAt costMicros currency status cancelRequested
        input { __typename ... on TextPart { text } }
      }
    }
  }
}`;

type Strategy = "ENQUEUE" | "REJECT" | "INTERRUPT";

/** A run the API lists but the stream has not shown yet (no worker took it up): as the API says. */
function listed(meta: RunMeta | undefined): RunModel {
  const status: Record<string, RunStatus> = {
    queued: "queued",
    running: "running",
    waiting: "waiting-approval",
    completed: "completed",
    failed: "failed",
    cancelled: "cancelled",
  };
  return { ...emptyRun, status: status[meta?.status ?? "queued"] ?? "queued" };
}

export function ThreadPage({ id }: { id: string }) {
  const state = useThread(id);
  const pending = usePending();
  const [data, setData] = useState<ThreadData["thread"] | null>(null);
  const [missing, setMissing] = useState(false);
  const [error, setError] = useState<string | null>(null);
  const [agents, setAgents] = useState<{ name: string; version: string }[]>([]);
  const [connection, setConnection] = useState<string>("connecting");
  const [message, setMessage] = useState("");
  const [agent, setAgent] = useState("");
  const [strategy, setStrategy] = useState<Strategy>("ENQUEUE");
  const [sending, setSending] = useState(false);
  const [renaming, setRenaming] = useState<string | null>(null);
  const [confirmDelete, setConfirmDelete] = useState(false);
  const [cancelled, setCancelled] = useState<Set<string>>(new Set());

  const load = useCallback(async () => {
    try {
      const d = await gql<ThreadData>(THREAD, { id });
      setData(d.thread);
    } catch (e) {
      if (e instanceof ApiError && e.code === "NOT_FOUND") setMissing(true);
      else setError(describe(e));
    }
  }, [id]);

  useEffect(() => {
    void load();
    gql<{ agents: { name: string; version: string }[] }>("query { agents { name version } }")
      .then((r) => {
        setAgents(r.agents);
        setAgent((a) => a || r.agents[0]?.name || "");
      })
      .catch(() => {});
  }, [load]);

  useEffect(() => {
    if (missing) return;
    const following = follow(id, {
      resubscribed: () => dispatch(id, { type: "resubscribed" }),
      item: (item) => dispatch(id, { type: "item", item }),
      cursors: () => cursors(threadState(id)),
      gap: () => hasGap(threadState(id)),
      status: setConnection,
      signInRequired,
    });
    return () => following.stop();
  }, [id, missing]);

  // A run seen in the stream that the page has no details of yet (cost, agent): read them.
  const known = new Set(data?.runs.nodes.map((r) => r.id));
  const unknownRun = state.order.find((r) => !known.has(r));
  const endedCount = state.order.filter((r) =>
    ["completed", "failed", "cancelled"].includes(state.runs[r].view.status),
  ).length;
  const steps = state.order.reduce((n, r) => n + state.runs[r].base.steps, 0);
  useEffect(() => {
    if (data) void load();
    // Reload when a run appears, completes a step or ends: its message, agent and cost.
  }, [unknownRun, endedCount, steps]);

  const meta = useMemo(() => new Map(data?.runs.nodes.map((r) => [r.id, r])), [data]);
  // The message that started each run, known from the moment it was sent (the thread's history
  // holds it only once the run's first step commits).
  const userText = useMemo(() => {
    const m = new Map<string, string>();
    for (const run of data?.runs.nodes ?? []) {
      const text = run.input.flatMap((p) => (p.__typename === "TextPart" ? [p.text] : [])).join("");
      if (text) m.set(run.id, text);
    }
    return m;
  }, [data]);
  const pendingIds = useMemo(() => new Set(pending.items.map((p) => p.id)), [pending.items]);

  // Runs in the order they were created: those streamed, and those the API lists that have
  // streamed nothing yet (queued with no worker free).
  const order = useMemo(() => {
    const created = (r: string) => meta.get(r)?.createdAt ?? "~";
    const all = [...new Set([...state.order, ...meta.keys()])];
    return all.sort((a, b) => (created(a) < created(b) ? -1 : created(a) > created(b) ? 1 : 0));
  }, [state.order, meta]);

  // One idempotency key per message until it is sent: Send again after a failure that may
  // have reached the server (a dropped connection, a timeout) is the same run, never a second.
  const sendKey = useRef<{ sent: string; key: string } | null>(null);
  const start = async (e: FormEvent) => {
    e.preventDefault();
    if (!message.trim() || !agent || sending) return;
    setSending(true);
    setError(null);
    const sent = JSON.stringify([id, agent, message.trim(), strategy]);
    if (sendKey.current?.sent !== sent) sendKey.current = { sent, key: newKey() };
    try {
      await gql(
        `mutation Start($input: StartRunInput!) { startRun(input: $input) { id } }`,
        {
          input: { threadId: id, agent, message: message.trim(), strategy, idempotencyKey: sendKey.current.key },
        },
      );
      sendKey.current = null;
      setMessage("");
      // Shown at once, queued or not (the stream shows it only once a worker takes it up).
      void load();
    } catch (err) {
      setError(
        err instanceof ApiError && err.code === "CONFLICT"
          ? `This thread has a run in progress, and “If a run is active” says to refuse: wait for it to end, or choose to wait behind it or interrupt it. (${err.message})`
          : describe(err),
      );
    } finally {
      setSending(false);
    }
  };

  const cancel = async (runId: string) => {
    setCancelled((c) => new Set([...c, runId]));
    try {
      await gql("mutation Cancel($id: ID!) { cancelRun(runId: $id) }", { id: runId });
      void load();
    } catch (err) {
      setCancelled((c) => new Set([...c].filter((r) => r !== runId)));
      setError(describe(err));
    }
  };

  const update = async (change: { title?: string | null; archived?: boolean }) => {
    try {
      const r = await gql<{ updateThread: { title: string | null; archivedAt: string | null } }>(
        `mutation Update($id: ID!, $title: String, $archived: Boolean) {
          updateThread(id: $id, title: $title, archived: $archived) { title archivedAt }
        }`,
        { id, ...change },
      );
      setData((d) => (d ? { ...d, ...r.updateThread } : d));
    } catch (err) {
      setError(describe(err));
    }
  };

  const remove = async () => {
    try {
      await gql("mutation Delete($id: ID!) { deleteThread(id: $id) { threads } }", { id });
      navigate("/");
    } catch (err) {
      setError(describe(err));
      setConfirmDelete(false);
    }
  };

  if (missing) {
    return (
      <section>
        <h1>Thread not found</h1>
        <p>It does not exist, or you may not see it.</p>
        <p>
          <a href="/" onClick={(e) => go(e, "/")}>Back to your threads</a>
        </p>
      </section>
    );
  }

  const title = data?.title ?? "Untitled thread";
  return (
    <section>
      <div className="row">
        {renaming === null ? (
          <h1>{data ? title : "Loading…"}</h1>
        ) : (
          <form
            className="row"
            onSubmit={(e) => {
              e.preventDefault();
              void update({ title: renaming.trim() || null });
              setRenaming(null);
            }}
          >
            <label htmlFor="rename">Title</label>
            <input id="rename" value={renaming} onChange={(e) => setRenaming(e.target.value)} maxLength={200} />
            <button type="submit">Save</button>
          </form>
        )}
        <span role="status" className={`connection ${connection}`}>
          {connection === "live" ? "Live" : connection === "reconnecting" ? "Reconnecting…" : connection === "signed-out" ? "Signed out" : "Connecting…"}
        </span>
      </div>
      {data && (
        <div className="row actions">
          <button type="button" className="link" onClick={() => setRenaming(data.title ?? "")}>
            Rename
          </button>
          <button type="button" className="link" onClick={() => void update({ archived: !data.archivedAt })}>
            {data.archivedAt ? "Restore" : "Archive"}
          </button>
          {confirmDelete ? (
            <>
              <button type="button" className="danger" onClick={() => void remove()}>
                Delete it and everything in it
              </button>
              <button type="button" className="link" onClick={() => setConfirmDelete(false)}>
                Keep it
              </button>
            </>
          ) : (
            <button type="button" className="link" onClick={() => setConfirmDelete(true)}>
              Delete
            </button>
          )}
        </div>
      )}
      {error && (
        <p role="alert" className="error">
          {error}
        </p>
      )}
      {order.length === 0 && data && <p className="muted">No runs yet: ask the agent something below.</p>}
      <div className="runs">
        {order.map((runId) => (
          <RunCard
            key={runId}
            model={state.runs[runId]?.view ?? listed(meta.get(runId))}
            meta={meta.get(runId)}
            userText={userText.get(runId)}
            pendingIds={pendingIds}
            stale={state.runs[runId] ? isStale(state.runs[runId]) : false}
            cancelling={cancelled.has(runId) || meta.get(runId)?.cancelRequested === true}
            onCancel={() => void cancel(runId)}
          />
        ))}
      </div>
      <form onSubmit={start} className="card start">
        <h2>Ask</h2>
        <label htmlFor="message">Message</label>
        <textarea id="message" rows={3} value={message} onChange={(e) => setMessage(e.target.value)} />
        <div className="row">
          <label htmlFor="agent">Agent</label>
          <select id="agent" value={agent} onChange={(e) => setAgent(e.target.value)}>
            {agents.map((a) => (
              <option key={`${a.name}@${a.version}`} value={a.name}>
                {a.name} (v{a.version})
              </option>
            ))}
          </select>
          <label htmlFor="strategy">If a run is active</label>
          <select id="strategy" value={strategy} onChange={(e) => setStrategy(e.target.value as Strategy)}>
            <option value="ENQUEUE">Wait behind it</option>
            <option value="REJECT">Refuse</option>
            <option value="INTERRUPT">Interrupt it</option>
          </select>
          <button type="submit" disabled={sending || !message.trim() || !agent}>
            Send
          </button>
        </div>
      </form>
    </section>
  );
}

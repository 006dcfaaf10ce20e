import { type FormEvent, useCallback, useEffect, useState } from "react";

import { describe, gql } from "../api";
import { follow as go, navigate } from "../router";
import { type Pending, usePending } from "../pending";
import { summarize } from "../text";

interface ThreadRow {
  id: string;
  title: string | null;
  createdAt: string;
  archivedAt: string | null;
  activeRunId: string | null;
}

interface Page {
  threads: { nodes: ThreadRow[]; pageInfo: { hasNextPage: boolean; endCursor: string | null } };
}

const THREADS = `query Threads($after: String, $archived: Boolean!) {
  threads(first: 20, after: $after, archived: $archived) {
    nodes { id title createdAt archivedAt activeRunId }
    pageInfo { hasNextPage endCursor }
  }
}`;

/** What a pending item asks, in a person's words: the tool and what it would do, or the question. */
function asking(p: Pending): string {
  if (p.kind !== "approval") return `Answer: ${String(p.request.prompt ?? "a question")}`;
  const preview = p.request.preview as { summary?: unknown } | null | undefined;
  const what = typeof preview?.summary === "string" ? preview.summary : summarize(p.request.input);
  return `Approve ${String(p.request.tool_name ?? "a tool call")}${what ? ` (${what})` : ""}`;
}

/** The titles of the threads pending items are on, read once each. */
function useTitles(ids: string[]): Map<string, string | null> {
  const [titles, setTitles] = useState(new Map<string, string | null>());
  const key = [...new Set(ids)].sort().join(",");
  useEffect(() => {
    const missing = key.split(",").filter((id) => id && !titles.has(id));
    if (!missing.length) return;
    let live = true;
    void Promise.all(
      missing.map((id) =>
        gql<{ thread: { title: string | null } }>("query T($id: ID!) { thread(id: $id) { title } }", { id })
          .then((r) => [id, r.thread.title] as const)
          .catch(() => [id, null] as const),
      ),
    ).then((found) => {
      if (live) setTitles((t) => new Map([...t, ...found]));
    });
    return () => {
      live = false;
    };
  }, [key]);
  return titles;
}

export function ThreadList() {
  const [rows, setRows] = useState<ThreadRow[]>([]);
  const [next, setNext] = useState<string | null>(null);
  const [loading, setLoading] = useState(true);
  const [error, setError] = useState<string | null>(null);
  const [archived, setArchived] = useState(false);
  const [title, setTitle] = useState("");
  const [creating, setCreating] = useState(false);
  const pending = usePending();
  const titles = useTitles(pending.items.map((p) => p.threadId));

  const load = useCallback(
    async (after: string | null) => {
      setLoading(true);
      setError(null);
      try {
        const page = await gql<Page>(THREADS, { after, archived });
        setRows((r) => (after ? [...r, ...page.threads.nodes] : page.threads.nodes));
        setNext(page.threads.pageInfo.hasNextPage ? page.threads.pageInfo.endCursor : null);
      } catch (e) {
        setError(describe(e));
      } finally {
        setLoading(false);
      }
    },
    [archived],
  );

  useEffect(() => {
    void load(null);
  }, [load]);

  const create = async (e: FormEvent) => {
    e.preventDefault();
    setCreating(true);
    setError(null);
    try {
      const made = await gql<{ createThread: { id: string } }>(
        "mutation New($title: String) { createThread(title: $title) { id } }",
        { title: title.trim() || null },
      );
      navigate(`/threads/${made.createThread.id}`);
    } catch (err) {
      setError(describe(err));
      setCreating(false);
    }
  };

  return (
    <section>
      <h1>Threads</h1>
      <form onSubmit={create} className="row card">
        <label htmlFor="new-title">New thread title</label>
        <input
          id="new-title"
          value={title}
          onChange={(e) => setTitle(e.target.value)}
          placeholder="Optional"
          maxLength={200}
        />
        <button type="submit" disabled={creating}>
          New thread
        </button>
      </form>

      <section aria-labelledby="pending-heading" className="card">
        <h2 id="pending-heading">Waiting for you</h2>
        {!pending.loaded ? (
          <p className="muted">Loading…</p>
        ) : pending.items.length === 0 ? (
          <p className="muted">Nothing waits for your approval or answer.</p>
        ) : (
          <ul className="plain">
            {pending.items.map((p) => (
              <li key={p.id}>
                <a href={`/threads/${p.threadId}`} onClick={(e) => go(e, `/threads/${p.threadId}`)}>
                  {asking(p)}
                </a>
                <span className="muted">
                  {" "}
                  in {titles.get(p.threadId) ?? "an untitled thread"} · expires{" "}
                  {new Date(p.expiresAt).toLocaleString()}
                </span>
              </li>
            ))}
          </ul>
        )}
      </section>

      <div className="row">
        <h2>Your threads</h2>
        <label className="check">
          <input type="checkbox" checked={archived} onChange={(e) => setArchived(e.target.checked)} />
          Show archived
        </label>
      </div>
      {error && (
        <p role="alert" className="error">
          {error}
        </p>
      )}
      {!loading && !error && rows.length === 0 && (
        <p className="muted">No threads yet: start one above.</p>
      )}
      <ul className="threads">
        {rows.map((t) => (
          <li key={t.id}>
            <a href={`/threads/${t.id}`} onClick={(e) => go(e, `/threads/${t.id}`)}>
              {t.title ?? "Untitled thread"}
            </a>
            <span className="muted">
              {" "}
              {new Date(t.createdAt).toLocaleString()}
              {t.archivedAt ? " · archived" : ""}
              {t.activeRunId ? " · running" : ""}
            </span>
          </li>
        ))}
      </ul>
      {loading && <p className="muted" role="status">Loading…</p>}
      {next && !loading && (
        <button type="button" onClick={() => void load(next)}>
          Load more
        </button>
      )}
    </section>
  );
}

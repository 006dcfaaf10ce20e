import { type FormEvent, useCallback, useEffect, useState } from "react";

import { describe, gql } from "../api";
import { navigate } from "../router";
import { usePending } from "../pending";

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

function go(e: { preventDefault(): void }, path: string) {
  e.preventDefault();
  navigate(path);
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
                  {p.kind === "approval"
                    ? `Approve ${String(p.request.tool_name ?? "a tool call")}`
                    : `Answer: ${String(p.request.prompt ?? "a question")}`}
                </a>
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

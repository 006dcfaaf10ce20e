// The deployment's MCP servers: each one's health (connected and as pinned, drifted, down), its
// pinned tools against the live catalog, tools offered but not pinned, when it last answered a
// listing and its last failure. Refreshed while the screen is open.

import type { Api } from "@forge/client";
import { useEffect } from "react";

import { gql } from "../api";
import { States, When, useLoad } from "./common";

/** A server as the API gives it (every field selected: the generated type). */
type Server = Api.McpServerState;

const SERVERS = `query McpServers {
  mcpServers {
    name transport connected health pinned { name hash state } unpinned listedAt driftSince lastError lastErrorAt
  }
}`;

/** What each health means to an operator. */
const HEALTH: Record<string, string> = {
  ok: "Connected; its tools are as pinned.",
  drift: "Connected, but its catalog differs from the pins: changed and removed tools are not offered.",
  down: "Not connected; Forge retries with backoff. Its tools are not offered.",
  unlisted: "Connected; its catalog has not been listed yet.",
};

/** What a pinned tool's state means. */
const TOOL: Record<string, string> = {
  verified: "offered",
  changed: "changed since pinned: not offered until re-pinned",
  removed: "no longer offered by the server",
  unknown: "not listed yet",
};

const REFRESH_MS = 5_000;

function ServerCard({ s }: { s: Server }) {
  const id = `mcp-${s.name.replace(/[^A-Za-z0-9_-]/g, "-")}`;
  return (
    <article className="card mcp-server" aria-labelledby={id}>
      <h3 id={id}>
        {s.name} <span className={`badge health-${s.health}`}>{s.health}</span>
      </h3>
      <p>{HEALTH[s.health] ?? s.health}</p>
      <dl className="facts">
        <dt>Transport</dt>
        <dd>{s.transport}</dd>
        <dt>Last listed</dt>
        <dd>{s.listedAt ? <When at={s.listedAt} /> : "never"}</dd>
        {s.driftSince ? (
          <>
            <dt>Drifted since</dt>
            <dd>
              <When at={s.driftSince} /> <span className="muted">(audited as <code>mcp.drift</code> in the deployment's trail)</span>
            </dd>
          </>
        ) : null}
        {s.lastError ? (
          <>
            <dt>Last failure</dt>
            <dd>
              {s.lastErrorAt ? (
                <>
                  <When at={s.lastErrorAt} />:{" "}
                </>
              ) : null}
              <span className="detail">{s.lastError}</span>
            </dd>
          </>
        ) : null}
      </dl>
      <h4>Pinned tools</h4>
      {s.pinned.length === 0 ? (
        <p className="muted">None: run `forge mcp pin` to pin its catalog.</p>
      ) : (
        <ul className="tools">
          {s.pinned.map((t) => (
            <li key={t.name} className={`tool-${t.state}`}>
              <code>{t.name}</code> — {TOOL[t.state] ?? t.state}{" "}
              <code className="muted" title={t.hash}>
                {t.hash.slice(0, 12)}
              </code>
            </li>
          ))}
        </ul>
      )}
      {s.unpinned.length > 0 ? (
        <>
          <h4>Offered but not pinned</h4>
          <ul className="tools unpinned">
            {s.unpinned.map((t) => (
              <li key={t}>
                <code>{t}</code>
              </li>
            ))}
          </ul>
        </>
      ) : null}
    </article>
  );
}

export function McpServers() {
  const { value, error, loading, reload } = useLoad(() => gql<{ mcpServers: Server[] }>(SERVERS), []);
  useEffect(() => {
    const timer = setInterval(() => {
      if (document.visibilityState === "visible") reload();
    }, REFRESH_MS);
    return () => clearInterval(timer);
  }, [reload]);
  const servers = value?.mcpServers ?? [];
  return (
    <section aria-labelledby="mcp-heading">
      <h2 id="mcp-heading">MCP servers</h2>
      <States loading={loading} error={error} empty={servers.length === 0} what="MCP servers" />
      {!loading && !error && servers.length === 0 ? (
        <p className="muted">This server was started without MCP servers (`forge serve --mcp FILE`).</p>
      ) : null}
      {servers.map((s) => (
        <ServerCard key={s.name} s={s} />
      ))}
    </section>
  );
}

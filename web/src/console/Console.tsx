// The operator console: the tenant's runs, one run inspected, dead letters, the audit trail,
// usage and cost, the MCP servers.
// What each screen shows is what the API lets the caller read (the same policies: an operator
// without the power sees the refusal, not an empty screen).

import type { ConsoleScreen } from "../router";
import { Audit } from "./Audit";
import { DeadLetters } from "./DeadLetters";
import { McpServers } from "./McpServers";
import { Go } from "./common";
import { RunInspector } from "./RunInspector";
import { Runs } from "./Runs";
import { Usage } from "./Usage";

const TABS: { screen: ConsoleScreen; to: string; label: string }[] = [
  { screen: "runs", to: "/console/runs", label: "Runs" },
  { screen: "dead-letters", to: "/console/dead-letters", label: "Dead letters" },
  { screen: "audit", to: "/console/audit", label: "Audit trail" },
  { screen: "usage", to: "/console/usage", label: "Usage and cost" },
  { screen: "mcp", to: "/console/mcp", label: "MCP servers" },
];

export function Console({ screen, id, search }: { screen: ConsoleScreen; id?: string; search: string }) {
  const current = screen === "run" ? "runs" : screen;
  return (
    <section className="console">
      <h1>Operator console</h1>
      <nav aria-label="Console" className="tabs">
        <ul>
          {TABS.map((t) => (
            <li key={t.screen}>
              <Go to={t.to} current={t.screen === current}>
                {t.label}
              </Go>
            </li>
          ))}
        </ul>
      </nav>
      {screen === "runs" ? (
        <Runs search={search} />
      ) : screen === "run" && id ? (
        <RunInspector id={id} key={id} />
      ) : screen === "dead-letters" ? (
        <DeadLetters />
      ) : screen === "audit" ? (
        <Audit search={search} />
      ) : screen === "mcp" ? (
        <McpServers />
      ) : (
        <Usage search={search} />
      )}
    </section>
  );
}

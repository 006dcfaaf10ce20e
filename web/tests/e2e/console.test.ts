// The operator console in real Chromium against a real `forge serve`, on data made by real runs:
// a completed run, a failed one, an approval decided by another person. Each screen is checked
// against the API (the cost chart's numbers are the usage API's), with axe on every screen, at a
// phone's width too, and refused to someone without the power.

import { spawnSync } from "node:child_process";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { type Server, createServer } from "node:http";
import { join } from "node:path";

import type { Browser, Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";

import { Forge, browser, forgeBin, freePort, repo, signedIn, violations } from "./harness";

let forge: Forge;
let chrome: Browser;
/** A stand-in OTLP collector: it keeps every body `forge serve --otel` exports. */
let collector: Server;
const exported: Buffer[] = [];
let alice: string;
let rita: string;
let ada: string;
const runs: Record<"completed" | "failed" | "approved" | "cited", string> = { completed: "", failed: "", approved: "", cited: "" };
const shots = join(repo, "web/tests/e2e/screenshots");

interface RunState {
  run: { status: string };
}

async function start(token: string, agent: string, message: string): Promise<string> {
  const t = await forge.gql<{ createThread: { id: string } }>(token, "mutation { createThread(title: \"Console\") { id } }");
  const r = await forge.gql<{ startRun: { id: string } }>(
    token,
    "mutation($i: StartRunInput!) { startRun(input: $i) { id } }",
    { i: { threadId: t.createThread.id, agent, message } },
  );
  return r.startRun.id;
}

/** Waits until the run's state is `want` (asked again each 200 ms; the hook's timeout bounds it). */
async function reaches(id: string, want: string): Promise<void> {
  let seen = "";
  for (let i = 0; i < 150; i++) {
    const r = await forge.gql<RunState & { run: { failure: unknown } }>(
      alice,
      "query($id: ID!) { run(id: $id) { status failure } }",
      { id },
    );
    if (r.run.status === want) return;
    seen = JSON.stringify(r.run);
    await new Promise((ok) => setTimeout(ok, 200));
  }
  throw new Error(`run ${id} is not ${want}: ${seen}`);
}

beforeAll(async () => {
  // A daily quota per tenant, far above what the runs use, so that its use shows.
  const otlp = await freePort();
  collector = createServer((req, res) => {
    const body: Buffer[] = [];
    req.on("data", (c: Buffer) => body.push(c));
    req.on("end", () => {
      exported.push(Buffer.concat(body));
      res.writeHead(200, { "content-type": "application/x-protobuf" });
      res.end();
    });
  });
  await new Promise<void>((ok) => collector.listen(otlp, "127.0.0.1", ok));
  forge = await Forge.start({
    extra: () => ["--quota-tokens", "1000000", "--quota-cost-micros", "50000", "--quota-period", "day", "--otel"],
    env: {
      OTEL_EXPORTER_OTLP_ENDPOINT: `http://127.0.0.1:${otlp}`,
      OTEL_EXPORTER_OTLP_PROTOCOL: "http/protobuf",
      // Exported at once, so that the test finds the run's spans without waiting for a batch.
      OTEL_BSP_SCHEDULE_DELAY: "100",
    },
  });
  chrome = await browser();
  alice = await forge.token("acme", "alice", ["finance"]);
  rita = await forge.token("acme", "rita", ["finance"]);
  ada = await forge.token("acme", "ada", ["admin"]);
  mkdirSync(shots, { recursive: true });
  runs.completed = await start(alice, "calculator", "What is 12 times 7?");
  runs.failed = await start(alice, "stream", "loop until you fail");
  runs.approved = await start(alice, "payments", "Pay invoice INV-203 for 500.");
  runs.cited = await start(alice, "stream", "What is the refund window?");
  await reaches(runs.completed, "completed");
  await reaches(runs.cited, "completed");
  await reaches(runs.failed, "failed");
  await reaches(runs.approved, "waiting");
  const pending = await forge.gql<{ pendingInteractions: { nodes: { id: string; request: { input_hash: string } }[] } }>(
    rita,
    "{ pendingInteractions { nodes { id request } } }",
  );
  const [ask] = pending.pendingInteractions.nodes;
  await forge.gql(
    rita,
    "mutation($id: ID!, $h: String) { resolveApproval(interactionId: $id, approve: true, key: \"console-e2e\", inputHash: $h) { id } }",
    { id: ask.id, h: ask.request.input_hash },
  );
  await reaches(runs.approved, "completed");
}, 120_000);

afterAll(async () => {
  await chrome?.close();
  await forge?.stop();
  collector?.close();
});

async function axe(page: Page, screen: string) {
  expect(await violations(page), `accessibility of ${screen}`).toEqual([]);
}

async function shot(page: Page, name: string) {
  writeFileSync(join(shots, `${name}.png`), await page.screenshot({ fullPage: true }));
}

/** Nothing on the page is wider than the window (a phone scrolls tables inside their box). */
async function fitsWidth(page: Page) {
  const [scroll, inner] = await page.evaluate(() => [document.documentElement.scrollWidth, window.innerWidth]);
  expect(scroll).toBeLessThanOrEqual(inner);
}

describe("the operator console", () => {
  it("lists the tenant's runs, filters them, and inspects one", async () => {
    const page = await signedIn(chrome, forge.url, ada, "/");
    await page.getByRole("link", { name: "Console" }).click();
    await page.getByRole("heading", { name: "Runs" }).waitFor();
    const rows = page.locator("table.data tbody tr");
    await expect.poll(() => rows.count()).toBe(4);
    await page.locator("table.data tbody").getByRole("link", { name: `…${runs.failed.slice(-8)}` }).waitFor();
    await axe(page, "the runs list");
    await shot(page, "console-runs");
    // Only the failed one, and the filter survives a reload (it is in the address).
    await page.getByLabel("State").selectOption("failed");
    await expect.poll(() => rows.count()).toBe(1);
    await page.reload();
    await expect.poll(() => rows.count()).toBe(1);
    expect(await page.getByLabel("State").inputValue()).toBe("failed");
    await page.locator("table.data tbody").getByRole("link", { name: `…${runs.failed.slice(-8)}` }).click();
    await page.getByRole("heading", { name: "Events" }).waitFor();
    await page.getByText(/failed \(/).first().waitFor();
    await page.getByText(/^Step 1: /).waitFor();
    await axe(page, "a failed run inspected");
    await shot(page, "console-run-failed");
    await page.context().close();
  });

  it("filters runs by agent and version, failure code and days, kept in the address", async () => {
    const page = await signedIn(chrome, forge.url, ada, "/console/runs");
    const rows = page.locator("table.data tbody tr");
    await expect.poll(() => rows.count()).toBe(4);
    const ids = async () =>
      (await rows.locator("td:first-child code").evaluateAll((cs) => cs.map((c) => c.getAttribute("title"))));
    await page.getByLabel("Failure").selectOption("step_limit_exceeded");
    await expect.poll(ids).toEqual([runs.failed]);
    await page.getByLabel("Failure").selectOption("budget_exceeded");
    await page.getByText("No runs yet.").waitFor();
    await page.getByLabel("Failure").selectOption("");
    // By agent, through the form, then by following an agent's link (name and version).
    await page.getByLabel("Agent").fill("calculator");
    await page.getByRole("button", { name: "Filter" }).click();
    await expect.poll(ids).toEqual([runs.completed]);
    await page.getByLabel("Agent").fill("");
    await page.getByRole("button", { name: "Filter" }).click();
    await expect.poll(() => rows.count()).toBe(4);
    await page.locator("table.data tbody").getByRole("link", { name: /^payments/ }).click();
    await expect.poll(ids).toEqual([runs.approved]);
    expect(new URL(page.url()).searchParams.get("agent")).toBe("payments");
    const version = new URL(page.url()).searchParams.get("version") ?? "";
    expect(await page.getByLabel("Version").inputValue()).toBe(version);
    await page.getByLabel("Version").fill(`${version}-other`);
    await page.getByRole("button", { name: "Filter" }).click();
    await page.getByText("No runs yet.").waitFor();
    // Days: today holds all four; a window that ended yesterday none (the API agrees).
    await page.goto(`${forge.url}/console/runs`);
    const today = new Date().toISOString().slice(0, 10);
    const yesterday = new Date(Date.now() - 86_400_000).toISOString().slice(0, 10);
    await page.getByLabel("From (UTC day)").fill(today);
    await page.getByLabel("To (UTC day)").fill(today);
    await page.getByRole("button", { name: "Filter" }).click();
    await expect.poll(() => rows.count()).toBe(4);
    await page.getByLabel("From (UTC day)").fill(yesterday);
    await page.getByLabel("To (UTC day)").fill(yesterday);
    await page.getByRole("button", { name: "Filter" }).click();
    await page.getByText("No runs yet.").waitFor();
    const api = await forge.gql<{ runs: { nodes: unknown[] } }>(
      ada,
      "query($u: String) { runs(until: $u) { nodes { id } } }",
      { u: `${today}T00:00:00Z` },
    );
    expect(api.runs.nodes).toEqual([]);
    await axe(page, "the runs list filtered");
    await page.context().close();
  });

  it("shows a decided approval with who decided, and the cost reserved and settled", async () => {
    const page = await signedIn(chrome, forge.url, ada, `/console/runs/${runs.approved}`);
    await page.getByRole("heading", { name: "Approvals and questions" }).waitFor();
    const decided = page.locator("ul.interactions li").first();
    await decided.getByText("rita").waitFor();
    expect(await decided.textContent()).toContain("Approval of pay_invoice");
    const detail = await forge.gql<{ run: { costMicros: number; modelCalls: { cost_micros: number }[] } }>(
      ada,
      "query($id: ID!) { run(id: $id) { costMicros modelCalls } }",
      { id: runs.approved },
    );
    expect(detail.run.costMicros).toBeGreaterThan(0);
    await page.getByText(/settled, .* reserved/).waitFor();
    const calls = page.locator("table.data").first().locator("tbody tr");
    expect(await calls.count()).toBe(detail.run.modelCalls.length);
    // Each call names the worker that made it; each step its model latency.
    const workers = await calls.locator("td:nth-child(3)").allTextContents();
    expect(workers.every((w) => w.length > 0 && w !== "—"), workers.join()).toBe(true);
    await page.getByText(/^Step 1: .* \(model \d+\.\d+ s/).waitFor();
    // The trace to open in a tracing tool: the one the collector received the run's spans in.
    const trace = (await page.locator("dd.trace code").first().textContent()) ?? "";
    expect(trace).toMatch(/^[0-9a-f]{32}$/);
    const id = Buffer.from(trace, "hex");
    await expect.poll(() => exported.some((b) => b.includes(id)), { timeout: 20_000 }).toBe(true);
    await axe(page, "a run with a decided approval");
    await shot(page, "console-run-approved");
    await page.context().close();
  });

  it("opens a citation's exact span from the run inspector", async () => {
    const page = await signedIn(chrome, forge.url, ada, `/console/runs/${runs.cited}`);
    await page.getByRole("heading", { name: "Events" }).waitFor();
    await page.getByRole("button", { name: /^cites handbook\.md bytes 33–99$/ }).click();
    const dialog = page.getByRole("dialog");
    await dialog.getByText("Refunds are accepted within 30 days of delivery, with the receipt.").waitFor();
    await dialog.getByText("bytes 33–99").waitFor();
    await axe(page, "a citation opened from the inspector");
    await shot(page, "console-citation");
    await dialog.getByRole("button", { name: "Close" }).click();
    expect(await page.getByRole("dialog").count()).toBe(0);
    await page.context().close();
  });

  it("lists the audit trail with the approval's decider", async () => {
    const page = await signedIn(chrome, forge.url, ada, "/console/audit");
    await page.getByRole("heading", { name: "Audit trail" }).waitFor();
    const row = page.locator("table.data tbody tr").filter({ hasText: "rita" }).first();
    await row.waitFor();
    const api = await forge.gql<{ auditRecords: { actor: string; action: string }[] }>(ada, "{ auditRecords(limit: 200) }");
    expect(await page.locator("table.data tbody tr").count()).toBe(api.auditRecords.length);
    // Who: rita's records only, as the API lists them, also by following her name.
    const ritas = await forge.gql<{ auditRecords: { actor: string }[] }>(ada, '{ auditRecords(actor: "rita", limit: 200) }');
    expect(ritas.auditRecords.length).toBeGreaterThan(0);
    await row.getByRole("link", { name: "rita" }).click();
    await expect.poll(() => page.locator("table.data tbody tr").count()).toBe(ritas.auditRecords.length);
    expect(await page.getByLabel("Who").inputValue()).toBe("rita");
    const actors = await page.locator("table.data tbody td:nth-child(2)").allTextContents();
    expect(new Set(actors)).toEqual(new Set(["rita"]));
    await page.getByLabel("Who").fill("");
    await page.getByLabel("Action starts with").fill("no-such-action.");
    await page.getByRole("button", { name: "Filter" }).click();
    await page.getByText("No audit records yet.").waitFor();
    await axe(page, "the audit trail");
    await page.context().close();
  });

  it("charts cost per day with the usage API's numbers", async () => {
    const page = await signedIn(chrome, forge.url, ada, "/console/usage");
    await page.getByRole("heading", { name: "Usage and cost" }).waitFor();
    const chart = page.getByRole("img", { name: /Cost per day/ });
    await chart.waitFor();
    await page.locator("canvas").first().waitFor();
    const from = new Date(Date.now() - 29 * 86_400_000).toISOString().slice(0, 10);
    const to = new Date(Date.now() + 86_400_000).toISOString().slice(0, 10);
    const api = await forge.gql<{ usage: { day: string; totals: { cost_micros: number } }[] }>(
      ada,
      "query($f: String!, $t: String!) { usage(from: $f, to: $t) { day totals } }",
      { f: `${from}T00:00:00Z`, t: `${to}T00:00:00Z` },
    );
    const byDay = new Map<string, number>();
    for (const r of api.usage) byDay.set(r.day, (byDay.get(r.day) ?? 0) + r.totals.cost_micros);
    // One bar a day of the 30 shown: the API's sum on the days it has, nothing on the others.
    const days: string[] = JSON.parse((await chart.getAttribute("data-days")) ?? "[]");
    const micros: number[] = JSON.parse((await chart.getAttribute("data-micros")) ?? "[]");
    expect(days.length).toBe(30);
    expect(days[0]).toBe(from);
    for (const day of byDay.keys()) expect(days).toContain(day.slice(0, 10));
    expect(micros).toEqual(days.map((d) => byDay.get(d) ?? 0));
    const total = [...byDay.values()].reduce((a, b) => a + b, 0);
    expect(total).toBeGreaterThan(0);
    const shown = await page.locator("table.usage-table tfoot td").last().textContent();
    expect(shown).toBe(
      new Intl.NumberFormat("en-US", {
        style: "currency",
        currency: "USD",
        minimumFractionDigits: 2,
        maximumFractionDigits: total / 1e6 < 0.01 ? 6 : 2,
      }).format(total / 1e6),
    );
    // Per agent version and the most expensive runs: the breakdown API's numbers, summing to the
    // days' total.
    const b = await forge.gql<{
      usageBreakdown: { agents: { agentName: string; costMicros: number }[]; topRuns: { runId: string; costMicros: number }[] };
    }>(ada, "query($f: String!, $t: String!) { usageBreakdown(from: $f, to: $t) { agents { agentName costMicros } topRuns { runId costMicros } } }", {
      f: `${from}T00:00:00Z`,
      t: `${to}T00:00:00Z`,
    });
    expect(b.usageBreakdown.agents.reduce((n, a) => n + a.costMicros, 0)).toBe(total);
    expect(new Set(b.usageBreakdown.topRuns.map((r) => r.runId))).toEqual(new Set(Object.values(runs)));
    const agentRows = page.locator("table.agents-table tbody tr");
    expect(await agentRows.count()).toBe(b.usageBreakdown.agents.length);
    expect((await agentRows.locator("td:first-child").allTextContents()).map((t) => t.split(" ")[0])).toEqual(
      b.usageBreakdown.agents.map((a) => a.agentName),
    );
    const top = await page.locator("table.top-runs tbody td:first-child code").evaluateAll((cs) => cs.map((c) => c.getAttribute("title")));
    expect(top).toEqual(b.usageBreakdown.topRuns.map((r) => r.runId));
    // The quota: today's tokens and cost (every call of the tenant was made today), of its caps.
    const q = await forge.gql<{ usageBreakdown: { quota: { period: string; tokens: number; costMicros: number; maxTokens: number } } }>(
      ada,
      "query($f: String!, $t: String!) { usageBreakdown(from: $f, to: $t) { quota { period tokens costMicros maxTokens } } }",
      { f: `${from}T00:00:00Z`, t: `${to}T00:00:00Z` },
    );
    const tokens = api.usage.reduce(
      (n, r) => n + (r.totals as unknown as { usage: { input_tokens: number; output_tokens: number } }).usage.input_tokens +
        (r.totals as unknown as { usage: { output_tokens: number } }).usage.output_tokens,
      0,
    );
    expect(q.usageBreakdown.quota).toMatchObject({ period: "day", tokens, costMicros: total, maxTokens: 1_000_000 });
    await page.getByRole("heading", { name: "Quota this day" }).waitFor();
    await page.getByText(`Tokens: ${tokens} of 1000000`).waitFor();
    await axe(page, "usage and cost");
    await shot(page, "console-usage");
    await page.context().close();
  });

  it("works at a phone's width", async () => {
    const context = await chrome.newContext({ viewport: { width: 390, height: 800 } });
    const page = await context.newPage();
    await page.goto(`${forge.url}/favicon.svg`);
    await page.evaluate((t) => localStorage.setItem("forge.token", t), ada);
    for (const path of ["/console/runs", `/console/runs/${runs.approved}`, "/console/audit", "/console/usage"]) {
      await page.goto(forge.url + path);
      await page.locator("table.data").first().waitFor();
      const wide = await page.evaluate(() =>
        Array.from(document.querySelectorAll("body *"))
          .filter((e) => e.getBoundingClientRect().right > window.innerWidth && !e.closest(".table-wrap"))
          .map((e) => `${e.tagName}.${e.className}`)
          .slice(0, 5),
      );
      expect(wide, `wider than a phone on ${path}`).toEqual([]);
      await fitsWidth(page);
      await axe(page, `${path} on a phone`);
    }
    await shot(page, "console-usage-phone");
    await context.close();
  });

  it("shows someone without the power why not, rather than an empty screen", async () => {
    const page = await signedIn(chrome, forge.url, alice, "/console/runs");
    await page.getByRole("alert").getByText(/Could not load runs: Not permitted/).waitFor();
    expect(await page.getByRole("link", { name: "Console" }).count()).toBe(0);
    await axe(page, "the console refused");
    await page.context().close();
  });
});

describe("the console's dead letters", () => {
  it("replays a dead-lettered run from the console, audited, and only the tenant's own", async () => {
    const idle = await Forge.start({ noWorker: true });
    try {
      const admin = await idle.token("acme", "ada", ["admin"]);
      const submitted = JSON.parse(
        idle.cli([
          "submit", "--json", "--agent", join(repo, "web/tests/e2e/agents/stream.toml"), "--max-attempts", "1",
          "--tenant", "acme", "--principal", "alice", "Please count slowly.",
        ]),
      ) as { id: string };
      // A worker takes it and dies mid-run; with its one attempt spent, the job is dead once the
      // claim lapses, and the next worker dead-letters it.
      const doomed = idle.worker(["--lease-ttl-ms", "1500"]);
      const status = async () =>
        (await idle.gql<{ run: { status: string; lastSeq: number } }>(admin, "query($id: ID!) { run(id: $id) { status lastSeq } }", { id: submitted.id })).run;
      for (let i = 0; i < 300 && (await status()).status !== "running"; i++) await new Promise((ok) => setTimeout(ok, 100));
      await Forge.crash(doomed);
      idle.worker();
      const listed = async () =>
        (await idle.gql<{ deadLetters: { id: string; runId: string }[] }>(admin, "{ deadLetters { id runId } }")).deadLetters;
      let dead: { id: string; runId: string }[] = [];
      for (let i = 0; i < 300 && dead.length === 0; i++) {
        dead = await listed();
        if (!dead.length) await new Promise((ok) => setTimeout(ok, 100));
      }
      expect(dead.map((d) => d.runId)).toEqual([submitted.id]);
      // Another tenant's administrator neither sees nor touches it.
      const other = await idle.token("globex", "gil", ["admin"]);
      expect((await idle.gql<{ deadLetters: unknown[] }>(other, "{ deadLetters { id } }")).deadLetters).toEqual([]);
      await expect(
        idle.gql(other, "mutation($id: ID!) { replayDeadLetter(jobId: $id) { id } }", { id: dead[0].id }),
      ).rejects.toThrow(/NOT_FOUND|not found/i);

      const page = await signedIn(chrome, idle.url, admin, "/console/dead-letters");
      await page.getByRole("heading", { name: "Dead letters" }).waitFor();
      const row = page.locator("table.data tbody tr").filter({ hasText: dead[0].runId.slice(-8) });
      await row.waitFor();
      await axe(page, "dead letters");
      await shot(page, "console-dead-letters");
      // At a phone's width, the list with its buttons: nothing wider than the window.
      const phone = await chrome.newContext({ viewport: { width: 390, height: 800 } });
      const small = await phone.newPage();
      await small.goto(`${idle.url}/favicon.svg`);
      await small.evaluate((t) => localStorage.setItem("forge.token", t), admin);
      await small.goto(`${idle.url}/console/dead-letters`);
      await small.locator("table.data tbody tr").first().waitFor();
      await fitsWidth(small);
      await axe(small, "dead letters on a phone");
      await phone.close();
      await row.getByRole("button", { name: "Replay" }).click();
      await page.getByRole("status").getByText(/Replayed: a worker takes run/).waitFor();
      await page.getByText("No dead letters yet.").waitFor();
      // The worker alive takes it up and finishes it.
      for (let i = 0; i < 600 && (await status()).status !== "completed"; i++) await new Promise((ok) => setTimeout(ok, 100));
      expect((await status()).status).toBe("completed");
      const audit = await idle.gql<{ auditRecords: { actor: string; action: string }[] }>(admin, "{ auditRecords(action: \"job.\") }");
      expect(audit.auditRecords.map((r) => [r.action, r.actor])).toContainEqual(["job.replayed", "ada"]);
      await page.context().close();
    } finally {
      await idle.stop();
    }
  });
});

/**
 * Writes an MCP configuration into `dir` with three servers on the test server `drift_server.py`,
 * pins them, and leaves them as the console should show: `steady` as pinned, `shifting` no longer
 * offering a pinned tool (`touch`) and offering one unpinned (`reveal`), `broken` never starting.
 * Returns `forge serve`'s arguments.
 */
function mcpServers(dir: string): string[] {
  const script = join(repo, "crates/forge-testkit/mcp-servers/drift_server.py");
  const server = (name: string, env: Record<string, string>, command = "python3") =>
    [
      "[[servers]]",
      `name = ${JSON.stringify(name)}`,
      'transport = "stdio"',
      `command = ${JSON.stringify(command)}`,
      `args = [${JSON.stringify(script)}]`,
      `env = { ${Object.entries({ FORGE_LEDGER: join(dir, "ledger.jsonl"), ...env })
        .map(([k, v]) => `${k} = ${JSON.stringify(v)}`)
        .join(", ")} }`,
      "startup_timeout_secs = 5",
      "",
    ].join("\n");
  writeFileSync(join(dir, "pin.toml"), server("steady", {}) + server("shifting", {}));
  const pinned = spawnSync(forgeBin(), ["mcp", "pin", "--mcp", join(dir, "pin.toml")], { cwd: dir, encoding: "utf8" });
  if (pinned.status !== 0) throw new Error(`forge mcp pin failed: ${pinned.stderr}`);
  const lock = JSON.parse(readFileSync(join(dir, "mcp.lock"), "utf8"));
  delete lock.servers.shifting.tools.reveal;
  writeFileSync(join(dir, "mcp.lock"), JSON.stringify(lock, null, 2));
  writeFileSync(
    join(dir, "serve.toml"),
    server("steady", {}) + server("shifting", { FORGE_HIDE: "touch" }) + server("broken", {}, join(dir, "no-such-server")),
  );
  return ["--mcp", join(dir, "serve.toml")];
}

describe("the console's MCP servers", () => {
  let withMcp: Forge;
  let admin: string;

  beforeAll(async () => {
    withMcp = await Forge.start({ extra: mcpServers });
    admin = await withMcp.token("acme", "ada", ["admin"]);
  }, 60_000);

  afterAll(async () => {
    await withMcp?.stop();
  });

  it("shows each server's health, its pins against the live catalog, and its last failure", async () => {
    interface Server {
      name: string;
      health: string;
      pinned: { name: string; state: string }[];
      unpinned: string[];
      listedAt: string | null;
      driftSince: string | null;
      lastError: string | null;
    }
    const api = await withMcp.gql<{ mcpServers: Server[] }>(
      admin,
      "{ mcpServers { name health pinned { name state } unpinned listedAt driftSince lastError } }",
    );
    const by = new Map(api.mcpServers.map((s) => [s.name, s]));
    expect([...by.keys()]).toEqual(["steady", "shifting", "broken"]);
    expect(by.get("steady")).toMatchObject({ health: "ok", unpinned: [], driftSince: null });
    expect(by.get("steady")?.pinned.map((t) => `${t.name}:${t.state}`)).toEqual([
      "echo:verified",
      "flip:verified",
      "reveal:verified",
      "touch:verified",
    ]);
    expect(by.get("steady")?.listedAt).toBeTruthy();
    expect(by.get("shifting")).toMatchObject({ health: "drift", unpinned: ["reveal"] });
    expect(by.get("shifting")?.pinned.map((t) => `${t.name}:${t.state}`)).toEqual([
      "echo:verified",
      "flip:verified",
      "touch:removed",
    ]);
    expect(by.get("shifting")?.driftSince).toBeTruthy();
    expect(by.get("broken")).toMatchObject({ health: "down", listedAt: null, pinned: [] });
    expect(by.get("broken")?.lastError).toBeTruthy();

    const page = await signedIn(chrome, withMcp.url, admin, "/console/mcp");
    await page.getByRole("heading", { name: "MCP servers" }).waitFor();
    const card = (name: string) => page.locator("article.mcp-server").filter({ has: page.getByRole("heading", { name: new RegExp(`^${name} `) }) });
    await card("steady").getByText("Connected; its tools are as pinned.").waitFor();
    await card("shifting").getByText(/differs from the pins/).waitFor();
    await card("shifting").locator("li.tool-removed").getByText("touch").waitFor();
    await card("shifting").locator("ul.unpinned").getByText("reveal").waitFor();
    await card("broken").getByText(/Not connected/).waitFor();
    await card("broken").getByText(by.get("broken")?.lastError?.slice(0, 40) ?? "?", { exact: false }).waitFor();
    await axe(page, "the MCP servers");
    await shot(page, "console-mcp");
    await page.context().close();

    // At a phone's width: nothing wider than the window, still axe-clean.
    const phone = await chrome.newContext({ viewport: { width: 390, height: 800 } });
    const small = await phone.newPage();
    await small.goto(`${withMcp.url}/favicon.svg`);
    await small.evaluate((t) => localStorage.setItem("forge.token", t), admin);
    await small.goto(`${withMcp.url}/console/mcp`);
    await small.locator("article.mcp-server").nth(2).waitFor();
    await fitsWidth(small);
    await axe(small, "the MCP servers on a phone");
    await phone.close();

    // Someone without the power is refused, in the API and on the screen.
    const bob = await withMcp.token("acme", "bob", ["finance"]);
    const refused = await fetch(`${withMcp.url}/graphql`, {
      method: "POST",
      headers: { "content-type": "application/json", authorization: `Bearer ${bob}` },
      body: JSON.stringify({ query: "{ mcpServers { name } }" }),
    }).then((r) => r.json());
    expect(refused.errors?.[0]?.extensions?.code).toBe("FORBIDDEN");
  });
});

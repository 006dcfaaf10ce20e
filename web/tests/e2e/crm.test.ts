// The CRM's main path in real Chromium: the application's own binary (`crm serve`, built against
// the packaged crates by `cargo xtask package-examples`), which starts the CRM's MCP server for
// Forge to import. A rep asks to mark an opportunity won; the update is an external write over
// MCP that a manager approves in Forge's web client; it then applies once.

import { type ChildProcess, spawn, spawnSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";

import type { Browser } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";

import { browser, freePort, repo, signedIn, violations } from "./harness";

/** The `crm` binary: `CRM_BIN`, or the debug build in the target directory. */
function crmBin(): string {
  const bin = resolve(
    process.env.CRM_BIN ?? join(process.env.CARGO_TARGET_DIR ?? join(repo, "target"), "debug", "crm"),
  );
  if (spawnSync(bin, ["--version"]).status !== 0) {
    throw new Error(`the crm binary is not at ${bin}: build it with \`cargo xtask package-examples\` (or set CRM_BIN)`);
  }
  return bin;
}

let child: ChildProcess;
let chrome: Browser;
let base = "";
let log = "";
const dir = mkdtempSync(join(tmpdir(), "crm-e2e-"));

async function token(principal: string, roles: string[]): Promise<string> {
  const r = await fetch(`${base}/auth/dev`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ tenant: "acme", principal, roles }),
  });
  return ((await r.json()) as { token: string }).token;
}

async function gql<T>(auth: string, query: string, variables: Record<string, unknown> = {}): Promise<T> {
  const r = await fetch(`${base}/graphql`, {
    method: "POST",
    headers: { "content-type": "application/json", authorization: `Bearer ${auth}` },
    body: JSON.stringify({ query, variables }),
  });
  const body = (await r.json()) as { data?: T; errors?: { message: string }[] };
  if (body.errors?.length) throw new Error(JSON.stringify(body.errors));
  return body.data as T;
}

beforeAll(async () => {
  const port = await freePort();
  base = `http://127.0.0.1:${port}`;
  child = spawn(crmBin(), ["serve", "--dev-sign-in", "--data", dir, "--listen", `127.0.0.1:${port}`], {
    cwd: dir,
    env: { ...process.env, CRM_JWT_SECRET: "crm-e2e-secret-crm-e2e-secret-0123456789" },
    stdio: ["ignore", "pipe", "pipe"],
  });
  child.stdout?.on("data", (d) => (log += d));
  child.stderr?.on("data", (d) => (log += d));
  const deadline = Date.now() + 30_000;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`crm exited:\n${log}`);
    try {
      if ((await fetch(`${base}/healthz`)).ok) break;
    } catch {
      // not yet
    }
    if (Date.now() > deadline) throw new Error(`crm did not answer:\n${log}`);
    await new Promise((r) => setTimeout(r, 100));
  }
  chrome = await browser();
});

afterAll(async () => {
  await chrome?.close();
  child?.kill("SIGKILL");
  rmSync(dir, { recursive: true, force: true });
});

type Opportunity = { id: string; stage: string; owner: string };

describe("the CRM", () => {
  it("takes a manager's approval of a record update in the browser, and applies it once over MCP", async () => {
    const alice = await token("alice", ["sales"]);
    const carol = await token("carol", ["manager"]);
    const thread = (await gql<{ createThread: { id: string } }>(alice, "mutation { createThread { id } }")).createThread.id;
    await gql(alice, "mutation($i: StartRunInput!) { startRun(input: $i) { id } }", {
      i: { threadId: thread, agent: "assistant", message: "Please mark opp-1 won" },
    });

    const page = await signedIn(chrome, base, carol, "/");
    await page.getByRole("link", { name: "Approve crm__update_opportunity" }).click({ timeout: 30_000 });
    const card = page.getByRole("region", { name: "Approve crm__update_opportunity?" });
    await card.waitFor();
    await expect.poll(() => card.locator("pre.json").textContent()).toContain('"stage": "won"');
    // What the update does, in the CRM's terms, above the raw input: the record and its stage,
    // and the record's lines before and after.
    await card.getByText("Move Initech renewal (opp-1) from proposal to won").waitFor();
    expect(await card.locator(".facts").textContent()).toContain("proposal → won");
    expect(await card.locator(".diff del").allTextContents()).toEqual(["- stage: proposal"]);
    expect(await card.locator(".diff ins").allTextContents()).toEqual(["+ stage: won"]);
    expect(await violations(page), "accessibility of the approval").toEqual([]);
    await card.getByRole("button", { name: "Approve" }).dblclick();
    await card.getByText("You approved it.").waitFor();
    await page.locator(".badge.completed").last().waitFor({ timeout: 30_000 });

    const mine = async (auth: string) =>
      (await (await fetch(`${base}/crm/opportunities`, { headers: { authorization: `Bearer ${auth}` } })).json()) as Opportunity[];
    const alices = await mine(alice);
    expect(alices.map((o) => o.owner)).toEqual(["alice", "alice"]);
    expect(alices.find((o) => o.id === "opp-1")?.stage).toBe("won");
    // The manager sees every rep's opportunities; the rep only their own.
    expect((await mine(carol)).length).toBe(3);
    await page.context().close();
  });
});

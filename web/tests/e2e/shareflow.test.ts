// ShareFlow's main path in real Chromium: the application's own binary (`shareflow serve`, built
// against the packaged crates by `cargo xtask package-examples`) with its bundled publishing
// service. An editor drops a document, the agent drafts a cited post, a reviewer approves it in
// Forge's web client, and the publishing service records exactly one post for it.

import { type ChildProcess, spawn, spawnSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";

import type { Browser } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";

import { browser, freePort, repo, signedIn, violations } from "./harness";

/** The `shareflow` binary: `SHAREFLOW_BIN`, or the debug build in the target directory. */
function shareflowBin(): string {
  const bin = resolve(
    process.env.SHAREFLOW_BIN ?? join(process.env.CARGO_TARGET_DIR ?? join(repo, "target"), "debug", "shareflow"),
  );
  if (spawnSync(bin, ["--version"]).status !== 0) {
    throw new Error(
      `the shareflow binary is not at ${bin}: build it with \`cargo xtask package-examples\` (or set SHAREFLOW_BIN)`,
    );
  }
  return bin;
}

let child: ChildProcess;
let chrome: Browser;
let base = "";
let log = "";
const dir = mkdtempSync(join(tmpdir(), "shareflow-e2e-"));

async function token(tenant: string, principal: string, roles: string[]): Promise<string> {
  const r = await fetch(`${base}/auth/dev`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ tenant, principal, roles }),
  });
  return ((await r.json()) as { token: string }).token;
}

async function api<T>(method: string, path: string, auth: string, body?: unknown): Promise<{ status: number; body: T }> {
  const r = await fetch(`${base}${path}`, {
    method,
    headers: { "content-type": "application/json", authorization: `Bearer ${auth}` },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  return { status: r.status, body: (await r.json()) as T };
}

beforeAll(async () => {
  const [port, publisher] = [await freePort(), await freePort()];
  base = `http://127.0.0.1:${port}`;
  child = spawn(
    shareflowBin(),
    ["serve", "--dev-sign-in", "--data", dir, "--listen", `127.0.0.1:${port}`, "--publisher-listen", `127.0.0.1:${publisher}`],
    {
      cwd: dir,
      env: { ...process.env, SHAREFLOW_JWT_SECRET: "shareflow-e2e-secret-shareflow-e2e-secret-0123" },
      stdio: ["ignore", "pipe", "pipe"],
    },
  );
  child.stdout?.on("data", (d) => (log += d));
  child.stderr?.on("data", (d) => (log += d));
  const deadline = Date.now() + 30_000;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`shareflow exited:\n${log}`);
    try {
      if ((await fetch(`${base}/healthz`)).ok) break;
    } catch {
      // not yet
    }
    if (Date.now() > deadline) throw new Error(`shareflow did not answer:\n${log}`);
    await new Promise((r) => setTimeout(r, 100));
  }
  chrome = await browser();
});

afterAll(async () => {
  await chrome?.close();
  child?.kill("SIGKILL");
  rmSync(dir, { recursive: true, force: true });
});

type Post = { document: string; via: string; text: string; status: string; attempts: number };

describe("ShareFlow", () => {
  it("drafts a cited post, takes the reviewer's approval in the browser, and publishes it once", async () => {
    const admin = await token("acme", "ada", ["admin"]);
    const editor = await token("acme", "eve", ["editor"]);
    const reviewer = await token("acme", "rita", ["reviewer"]);
    expect((await api("PUT", "/app/workflow", admin, { workflow: "agent" })).status).toBe(200);
    const dropped = await api<{ status: string }>("POST", "/app/documents", editor, {
      id: "spring-launch",
      title: "Spring launch",
      body: "# Spring launch\n\nThe spring collection launches on 14 March with twelve new colours.\n\nEvery piece in it is made from organic cotton, and the launch weekend brings free delivery on\nall orders.\n",
    });
    expect(dropped.status).toBe(201);
    expect(dropped.body.status).toBe("drafting");

    // The editor may not pass their own post: the reviewer does, in the web client.
    const page = await signedIn(chrome, base, reviewer, "/");
    await page.getByRole("link", { name: "Approve publish_post" }).click({ timeout: 30_000 });
    const card = page.getByRole("region", { name: "Approve publish_post?" });
    await card.waitFor();
    await expect.poll(() => card.locator("pre.json").textContent()).toContain("14 March");
    // Which document, who dropped it and the post the feed gains, above the raw input.
    await card.getByText("Publish the post for “Spring launch”", { exact: false }).waitFor();
    expect(await card.locator(".facts").textContent()).toContain("drafting → published");
    expect((await card.locator(".diff ins").allTextContents()).join("\n")).toContain("14 March");
    // The draft and its citation are on the page above the card.
    await page.getByText("Draft for Spring launch", { exact: false }).first().waitFor();
    expect(await violations(page), "accessibility of the review screen").toEqual([]);
    await card.getByRole("button", { name: "Approve" }).dblclick();
    await card.getByText("You approved it.").waitFor();

    let posts: Post[] = [];
    await expect
      .poll(
        async () => {
          posts = (await api<Post[]>("GET", "/app/posts", editor)).body;
          return posts.length;
        },
        { timeout: 30_000 },
      )
      .toBe(1);
    expect(posts[0].document).toBe("spring-launch");
    expect(posts[0].via).toBe("agent");
    expect(posts[0].text).toContain("14 March");
    expect(posts[0].attempts).toBe(1);
    // The service holds the post before the tool records the document as published: polled.
    await expect
      .poll(
        async () => {
          const docs = await api<{ id: string; status: string }[]>("GET", "/app/documents", editor);
          return docs.body.map((d) => [d.id, d.status]);
        },
        { timeout: 30_000 },
      )
      .toEqual([["spring-launch", "published"]]);
    await page.context().close();
  });
});

// The web client in real Chromium against a real `forge serve`: streaming, a cut connection, a
// reload and a server restart mid-run all end in exactly the committed text, once; approvals in
// the browser act once, two tabs at once included; another tenant's thread is not found; axe
// finds nothing on any screen.

import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";

import type { Browser, Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";

import { Forge, Proxy, browser, repo, shortToken, signedIn, violations } from "./harness";

const WORDS =
  "one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen seventeen eighteen nineteen twenty";
const SECOND = "ONE TWO THREE FOUR FIVE SIX SEVEN EIGHT NINE TEN ELEVEN TWELVE done at 21.";

let forge: Forge;
let chrome: Browser;
let alice: string;
let rita: string;
const shots = join(repo, "web/tests/e2e/screenshots");

beforeAll(async () => {
  forge = await Forge.start();
  chrome = await browser();
  alice = await forge.token("acme", "alice", ["finance"]);
  rita = await forge.token("acme", "rita", ["finance"]);
  mkdirSync(shots, { recursive: true });
});

afterAll(async () => {
  await chrome?.close();
  await forge?.stop();
});

async function shot(page: Page, name: string) {
  writeFileSync(join(shots, `${name}.png`), await page.screenshot({ fullPage: true }));
}

async function axe(page: Page, screen: string) {
  const found = await violations(page);
  expect(found, `accessibility of ${screen}`).toEqual([]);
}

async function newThread(token: string, title: string): Promise<string> {
  const r = await forge.gql<{ createThread: { id: string } }>(
    token,
    "mutation($t: String) { createThread(title: $t) { id } }",
    { t: title },
  );
  return r.createThread.id;
}

async function startRun(token: string, threadId: string, agent: string, message: string): Promise<string> {
  const r = await forge.gql<{ startRun: { id: string } }>(
    token,
    "mutation($i: StartRunInput!) { startRun(input: $i) { id } }",
    { i: { threadId, agent, message } },
  );
  return r.startRun.id;
}

/** Sends a message from the page's form. */
async function ask(page: Page, agent: string, message: string) {
  await page.getByLabel("Message").fill(message);
  await page.getByLabel("Agent").selectOption(agent);
  await page.getByRole("button", { name: "Send" }).click();
}

/** The page's assistant text of its last run, once it shows `Completed`. */
async function completedText(page: Page): Promise<string> {
  await page.locator(".badge.completed").last().waitFor({ timeout: 60_000 });
  return (await page.locator(".run").last().locator(".assistant .text").allTextContents()).join("\n");
}

const EXPECTED = `${WORDS} \n${SECOND}`;

function normal(text: string): string {
  return text.replace(/\s+/g, " ").trim();
}

/** Waits until the page shows some of the run's text, but not all of it. */
async function midRun(page: Page) {
  await page.getByText("four", { exact: false }).first().waitFor({ timeout: 30_000 });
  expect(await page.locator(".badge.completed").count()).toBe(0);
}

describe("the web client", () => {
  it("signs in, lists threads, and streams a run to completion", async () => {
    const page = await signedIn(chrome, forge.url, "", "/");
    await page.getByRole("heading", { name: "Sign in" }).waitFor();
    await axe(page, "sign-in");
    await shot(page, "sign-in");
    await page.getByLabel("Tenant").fill("acme");
    await page.getByLabel("Principal").fill("alice");
    await page.getByLabel("Roles (comma separated)").fill("finance");
    await page.getByRole("button", { name: "Sign in for development" }).click();
    await page.getByRole("heading", { name: "Threads", exact: true }).waitFor();
    await page.getByText("Nothing waits for your approval or answer.").waitFor();
    await axe(page, "thread list");
    await shot(page, "threads");
    await page.getByLabel("New thread title").fill("Counting");
    await page.getByRole("button", { name: "New thread" }).click();
    await page.getByRole("heading", { name: "Counting" }).waitFor();
    await page.getByText("No runs yet").waitFor();
    await ask(page, "stream", "Please count slowly.");
    await page.getByText("Running").first().waitFor();
    await page.getByText("three").first().waitFor();
    // The message shows while its run's first step is still in flight.
    await page.getByText("Please count slowly.").waitFor({ timeout: 3_000 });
    expect(await page.getByText("Running").count()).toBeGreaterThan(0);
    await shot(page, "thread-streaming");
    expect(normal(await completedText(page))).toBe(normal(EXPECTED));
    await page.getByText(/tokens in/).last().waitFor();
    await axe(page, "thread");
    await shot(page, "thread-completed");
    await page.context().close();
  });

  it("converges with no duplicated text when its connection is cut mid-run", async () => {
    const proxy = await Proxy.start(forge.port);
    try {
      const thread = await newThread(alice, "Cut");
      const page = await signedIn(chrome, proxy.url, alice, `/threads/${thread}`);
      await page.getByText("Live").waitFor();
      await ask(page, "stream", "Count for the cut.");
      await midRun(page);
      expect(proxy.cut()).toBeGreaterThan(0);
      await page.getByText("four").first().waitFor();
      expect(normal(await completedText(page))).toBe(normal(EXPECTED));
      const sockets = await page.evaluate(() => window.__forge?.sockets ?? 0);
      expect(sockets, "it reconnected").toBeGreaterThan(1);
      await page.context().close();
    } finally {
      await proxy.stop();
    }
  });

  it("converges when the page is reloaded mid-run", async () => {
    const thread = await newThread(alice, "Reload");
    const page = await signedIn(chrome, forge.url, alice, `/threads/${thread}`);
    await ask(page, "stream", "Count through a reload.");
    await midRun(page);
    await page.reload();
    expect(normal(await completedText(page))).toBe(normal(EXPECTED));
    expect(await page.locator(".run").count()).toBe(1);
    await page.context().close();
  });

  it("converges when the server is restarted mid-run, and the run completes once", async () => {
    const thread = await newThread(alice, "Restart");
    const page = await signedIn(chrome, forge.url, alice, `/threads/${thread}`);
    await ask(page, "stream", "Count through a restart.");
    await midRun(page);
    await forge.kill();
    await page.getByText("Reconnecting…").waitFor();
    await forge.boot();
    expect(normal(await completedText(page))).toBe(normal(EXPECTED));
    const runs = await forge.gql<{ thread: { runs: { nodes: { id: string; status: string; events: { type: string }[] }[] } } }>(
      alice,
      `query($id: ID!) { thread(id: $id) { runs(first: 2) { nodes { id status events(limit: 1000) { type } } } } }`,
      { id: thread },
    );
    expect(runs.thread.runs.nodes.length).toBe(1);
    const events = runs.thread.runs.nodes[0].events.map((e) => e.type);
    expect(events.filter((t) => t === "run.completed").length).toBe(1);
    await page.context().close();
  });

  it("takes an approval in the browser, and the run completes once", async () => {
    const thread = await newThread(alice, "Invoice 203");
    const run = await startRun(alice, thread, "payments", "Pay invoice INV-203 for 500.");
    // Alice started it: she may not approve her own payment.
    const own = await signedIn(chrome, forge.url, alice, `/threads/${thread}`);
    await own.getByText("Waiting for someone who may approve it.").waitFor({ timeout: 30_000 });
    await own.context().close();
    const page = await signedIn(chrome, forge.url, rita, "/");
    await page.getByRole("link", { name: "Approve pay_invoice" }).click();
    const card = page.getByRole("region", { name: "Approve pay_invoice?" });
    await card.waitFor();
    await expect.poll(() => card.locator("pre").textContent()).toContain('"amount": 500');
    await axe(page, "thread with an approval");
    await shot(page, "approval");
    const approve = card.getByRole("button", { name: "Approve" });
    // A double click is one decision.
    await approve.dblclick();
    await card.getByText("You approved it.").waitFor();
    expect(normal(await completedText(page))).toContain("Paid INV-203 after approval: receipt rcpt-");
    const r = await forge.gql<{ run: { status: string; interactions: { status: string }[]; events: { type: string }[] } }>(
      alice,
      `query($id: ID!) { run(id: $id) { status interactions { status } events(limit: 1000) { type } } }`,
      { id: run },
    );
    expect(r.run.status).toBe("completed");
    expect(r.run.interactions.map((i) => i.status)).toEqual(["resolved"]);
    expect(r.run.events.filter((e) => e.type === "run.completed").length).toBe(1);
    await page.context().close();
  });

  it("lets exactly one of two tabs deciding at once win", async () => {
    const thread = await newThread(alice, "Invoice 204");
    const run = await startRun(alice, thread, "payments", "Pay invoice INV-204 for 500.");
    const tabs = await Promise.all(
      [0, 1].map(() => signedIn(chrome, forge.url, rita, `/threads/${thread}`)),
    );
    const cards = tabs.map((t) => t.getByRole("region", { name: "Approve pay_invoice?" }));
    await Promise.all(cards.map((c) => c.getByRole("button", { name: "Approve" }).waitFor({ timeout: 30_000 })));
    // One approves, the other rejects, at the same moment: each tab's decision is held at the
    // network until both have been sent, then both go to the server together. (Clicked one after
    // the other, the first decision can reach the second tab and re-render its card before the
    // second click lands, and there is no race left to test.)
    const held: (() => Promise<void>)[] = [];
    let bothSent!: () => void;
    const sent = new Promise<void>((resolve) => (bothSent = resolve));
    await Promise.all(
      tabs.map((t) =>
        t.route("**/graphql", async (route) => {
          if (!(route.request().postData() ?? "").includes("resolveApproval")) {
            await route.continue();
            return;
          }
          held.push(() => route.continue());
          if (held.length === 2) bothSent();
        }),
      ),
    );
    await cards[0].getByRole("button", { name: "Approve" }).click();
    await cards[1].getByRole("button", { name: "Reject" }).click();
    await sent;
    await Promise.all(held.map((release) => release()));
    const outcome = async (i: number) => {
      const won = cards[i].getByText(/You (approved|rejected) it\./);
      const lost = cards[i].getByRole("alert");
      await won.or(lost).first().waitFor({ timeout: 30_000 });
      return (await won.count()) > 0 ? "won" : "lost";
    };
    const results = await Promise.all([outcome(0), outcome(1)]);
    expect([...results].sort()).toEqual(["lost", "won"]);
    const loser = results.indexOf("lost") === 0 ? cards[0] : cards[1];
    await expect.poll(() => loser.getByRole("alert").textContent()).toContain("Someone else got there first");
    const r = await forge.gql<{ run: { interactions: { status: string; resolution: { decision?: unknown } | null }[] } }>(
      alice,
      `query($id: ID!) { run(id: $id) { interactions { status resolution } } }`,
      { id: run },
    );
    expect(r.run.interactions.length).toBe(1);
    expect(r.run.interactions[0].status).toBe("resolved");
    await Promise.all(tabs.map((t) => t.context().close()));
  });

  it("shows another tenant's thread as not found", async () => {
    const thread = await newThread(alice, "Acme only");
    const mallory = await forge.token("globex", "mallory", ["finance"]);
    const page = await signedIn(chrome, forge.url, mallory, `/threads/${thread}`);
    await page.getByRole("heading", { name: "Thread not found" }).waitFor();
    await axe(page, "not found");
    await shot(page, "not-found");
    await page.context().close();
  });

  it("opens a citation's exact span", async () => {
    const thread = await newThread(alice, "Refunds");
    const page = await signedIn(chrome, forge.url, alice, `/threads/${thread}`);
    await ask(page, "stream", "What is the refund window?");
    await completedText(page);
    await page.getByRole("button", { name: /handbook\.md: “Refunds are accepted/ }).click();
    const dialog = page.getByRole("dialog");
    await dialog.getByText("Refunds are accepted within 30 days of delivery, with the receipt.").waitFor();
    await dialog.getByText("bytes 33–99").waitFor();
    await axe(page, "citation");
    await shot(page, "citation");
    await dialog.getByRole("button", { name: "Close" }).click();
    await page.context().close();
  });

  it("answers a question from a form generated from its schema", async () => {
    const thread = await newThread(alice, "Invoice 409");
    const page = await signedIn(chrome, forge.url, alice, `/threads/${thread}`);
    await ask(page, "payments", "Pay invoice INV-409.");
    const form = page.getByRole("form", { name: "What amount should I pay for INV-409?" });
    await form.waitFor({ timeout: 30_000 });
    await axe(page, "question");
    await shot(page, "question");
    await form.getByLabel("Answer").fill("60");
    await form.getByRole("button", { name: "Answer" }).click();
    expect(normal(await completedText(page))).toContain("Paid INV-409");
    await page.context().close();
  });

  it("sends an expired session to sign in again and comes back to the same view", async () => {
    const thread = await newThread(alice, "Expiring");
    const run = await startRun(alice, thread, "calculator", "What is 12 times 7?");
    await forge.gql(alice, "query($id: ID!) { run(id: $id) { id } }", { id: run });
    const page = await signedIn(chrome, forge.url, shortToken("acme", "alice", ["finance"], 4), `/threads/${thread}`);
    await page.getByText("12 × 7 = 84.").waitFor({ timeout: 30_000 });
    // The server closes the socket when the token expires: the page asks to sign in.
    await page.getByRole("heading", { name: "Sign in" }).waitFor({ timeout: 30_000 });
    await page.getByLabel("Principal").fill("alice");
    await page.getByRole("button", { name: "Sign in for development" }).click();
    await page.waitForURL(`**/threads/${thread}`);
    // The view was kept, and it follows the thread again.
    await page.getByText("12 × 7 = 84.").waitFor();
    await page.getByText("Live").waitFor();
    await page.context().close();
  });
});

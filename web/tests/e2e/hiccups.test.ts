// What a person sees when the network or the system hiccups, in real Chromium against a real
// `forge serve`: the text shown so far survives a cut connection and a server restart (sampled
// every frame, never shorter than before); a run no worker has taken up yet shows as queued, and
// cancelling it says so until it ends; a cancel mid-stream goes cancelling → cancelled; GraphiQL
// renders with every request off the server blocked; the session is shared by tabs (a
// middle-clicked link opens signed in, signing out signs out every tab) and its expiry is
// explained on a sign-in form for the same person.

import type { Browser, Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";

import { Forge, Proxy, browser, shortToken, signedIn, violations } from "./harness";

let forge: Forge;
let chrome: Browser;
let alice: string;

beforeAll(async () => {
  forge = await Forge.start({ graphiql: true });
  chrome = await browser();
  alice = await forge.token("acme", "alice", ["finance"]);
});

afterAll(async () => {
  await chrome?.close();
  await forge?.stop();
});

async function newThread(f: Forge, token: string, title: string): Promise<string> {
  const r = await f.gql<{ createThread: { id: string } }>(
    token,
    "mutation($t: String) { createThread(title: $t) { id } }",
    { t: title },
  );
  return r.createThread.id;
}

async function ask(page: Page, agent: string, message: string) {
  await page.getByLabel("Message").fill(message);
  await page.getByLabel("Agent").selectOption(agent);
  await page.getByRole("button", { name: "Send" }).click();
}

async function axe(page: Page, screen: string) {
  expect(await violations(page), `accessibility of ${screen}`).toEqual([]);
}

/**
 * Records, on every animation frame, the length of the last run's text and its badge: what a
 * person would have seen, frame by frame.
 */
async function sampleFrames(page: Page) {
  await page.evaluate(() => {
    const w = window as unknown as { __frames: { length: number; badge: string }[] };
    w.__frames = [];
    const tick = () => {
      const run = document.querySelectorAll(".run");
      const last = run[run.length - 1];
      if (last) {
        const text = Array.from(last.querySelectorAll(".assistant .text"))
          .map((p) => p.textContent ?? "")
          .join("");
        w.__frames.push({ length: text.length, badge: last.querySelector(".badge")?.textContent ?? "" });
      }
      requestAnimationFrame(tick);
    };
    requestAnimationFrame(tick);
  });
}

async function frames(page: Page): Promise<{ length: number; badge: string }[]> {
  return page.evaluate(() => (window as unknown as { __frames: { length: number; badge: string }[] }).__frames);
}

/** Every frame showed at least as much text as the one before, and a started run never read "Queued". */
function neverShrank(seen: { length: number; badge: string }[]) {
  expect(seen.length, "frames were sampled").toBeGreaterThan(10);
  for (let i = 1; i < seen.length; i++) {
    if (seen[i].length < seen[i - 1].length) {
      throw new Error(`frame ${i} showed ${seen[i].length} characters after ${seen[i - 1].length}`);
    }
  }
  const started = seen.findIndex((f) => f.badge === "Running");
  expect(started).toBeGreaterThanOrEqual(0);
  expect(seen.slice(started).filter((f) => f.badge === "Queued")).toEqual([]);
}

async function midRun(page: Page) {
  await page.getByText("four", { exact: false }).first().waitFor({ timeout: 30_000 });
}

async function completed(page: Page) {
  await page.locator(".badge.completed").last().waitFor({ timeout: 60_000 });
}

describe("through hiccups", () => {
  it("keeps the text shown across a cut connection, never shorter in any frame", async () => {
    const proxy = await Proxy.start(forge.port);
    try {
      const thread = await newThread(forge, alice, "Kept across a cut");
      const page = await signedIn(chrome, proxy.url, alice, `/threads/${thread}`);
      await page.getByText("Live").waitFor();
      await sampleFrames(page);
      await ask(page, "stream", "Count for the cut.");
      await midRun(page);
      // Cut twice, the second time while the first reconnect may still be replaying.
      expect(proxy.cut()).toBeGreaterThan(0);
      await page.getByText("six", { exact: false }).first().waitFor({ timeout: 30_000 });
      proxy.cut();
      await completed(page);
      neverShrank(await frames(page));
      await page.context().close();
    } finally {
      await proxy.stop();
    }
  });

  it("keeps the text shown through a server restart, marked as reconnecting", async () => {
    const thread = await newThread(forge, alice, "Kept across a restart");
    const page = await signedIn(chrome, forge.url, alice, `/threads/${thread}`);
    await page.getByText("Live").waitFor();
    await sampleFrames(page);
    await ask(page, "stream", "Count through a restart.");
    await midRun(page);
    const before = await page.locator(".run").last().locator(".assistant .text").allTextContents();
    await forge.kill();
    await page.getByText("Reconnecting…").waitFor();
    // The outage lasts until the server is back: what was shown stays, marked as such.
    await page.getByText("Reconnecting: showing what arrived before the connection dropped").waitFor();
    await page.waitForTimeout(1_500); // an outage of some length, not a wait for a condition
    const during = await page.locator(".run").last().locator(".assistant .text").allTextContents();
    expect(during.join("").length).toBeGreaterThanOrEqual(before.join("").length);
    expect(await page.locator(".run").last().locator(".badge").textContent()).not.toBe("Queued");
    await forge.boot();
    await completed(page);
    neverShrank(await frames(page));
    expect(await page.getByText("Reconnecting: showing what arrived").count()).toBe(0);
    await page.context().close();
  });

  it("shows a run no worker has taken up as queued, and cancelling it until it ends", async () => {
    const idle = await Forge.start({ noWorker: true });
    try {
      const token = await idle.token("acme", "alice", ["finance"]);
      const thread = await newThread(idle, token, "No worker");
      const page = await signedIn(chrome, idle.url, token, `/threads/${thread}`);
      await page.getByText("No runs yet").waitFor();
      await ask(page, "calculator", "What is 6 times 7?");
      const card = page.locator(".run").last();
      await card.getByText("Queued", { exact: true }).waitFor();
      await card.getByText("Waiting for a worker to take it up.").waitFor();
      await card.getByText("What is 6 times 7?").waitFor();
      // A reload shows it too.
      await page.reload();
      await card.getByText("Queued", { exact: true }).waitFor();
      expect(await page.getByText("No runs yet").count()).toBe(0);
      await axe(page, "a queued run");
      await card.getByRole("button", { name: "Cancel" }).click();
      await card.getByText("Cancelling…").waitFor();
      await card.getByText("It stops when a worker next takes it up.").waitFor();
      expect(await card.getByRole("button", { name: "Cancel" }).count()).toBe(0);
      // Still cancelling after a reload: the server says a cancel was asked for.
      await page.reload();
      await card.getByText("Cancelling…").waitFor();
      await axe(page, "a run being cancelled");
      // A worker takes it up, and it ends cancelled.
      idle.worker();
      await card.getByText("Cancelled", { exact: true }).waitFor({ timeout: 60_000 });
      expect(await card.getByText("Cancelling…").count()).toBe(0);
      await page.context().close();
    } finally {
      await idle.stop();
    }
  });

  it("goes cancelling → cancelled when a streaming run is cancelled, and the text stops", async () => {
    const thread = await newThread(forge, alice, "Cancel mid-stream");
    const page = await signedIn(chrome, forge.url, alice, `/threads/${thread}`);
    await ask(page, "stream", "Count, then be cancelled.");
    await midRun(page);
    const card = page.locator(".run").last();
    await card.getByRole("button", { name: "Cancel" }).click();
    await card.getByText("Cancelled", { exact: true }).waitFor({ timeout: 30_000 });
    await card.getByText(/^Cancelled/).last().waitFor();
    const text = (await card.locator(".assistant .text").allTextContents()).join("");
    expect(text).not.toContain("twenty");
    const run = await forge.gql<{ thread: { runs: { nodes: { status: string }[] } } }>(
      alice,
      "query($id: ID!) { thread(id: $id) { runs(first: 1) { nodes { status } } } }",
      { id: thread },
    );
    expect(run.thread.runs.nodes[0].status).toBe("cancelled");
    await page.context().close();
  });

  it("renders GraphiQL with every request off the server blocked", async () => {
    const context = await chrome.newContext();
    const page = await context.newPage();
    const elsewhere: string[] = [];
    await context.route("**/*", async (route) => {
      const url = new URL(route.request().url());
      if (url.host === `127.0.0.1:${forge.port}`) return route.continue();
      elsewhere.push(url.href);
      return route.abort("internetdisconnected");
    });
    const errors: string[] = [];
    page.on("console", (m) => {
      if (m.type() === "error") errors.push(m.text());
    });
    await page.goto(`${forge.url}/favicon.svg`);
    await page.evaluate((t) => localStorage.setItem("forge.token", t), alice);
    const introspected = page.waitForResponse(
      (r) => r.url().endsWith("/graphql") && r.request().method() === "POST" && r.status() === 200,
    );
    await page.goto(`${forge.url}/graphql`);
    await page.locator(".graphiql-container").waitFor({ timeout: 30_000 });
    await page.getByRole("button", { name: /Execute query/i }).waitFor();
    await introspected;
    // The schema loaded: the documentation explorer lists the API's root types.
    await page.getByRole("button", { name: /Show Documentation Explorer/i }).click();
    await page.getByText("Query", { exact: true }).first().waitFor();
    expect(elsewhere).toEqual([]);
    expect(errors.filter((e) => /Content Security Policy/.test(e))).toEqual([]);
    await context.close();
  });

  it("shares the session across tabs: a new tab opens signed in, signing out signs out both", async () => {
    const thread = await newThread(forge, alice, "Opened in a new tab");
    const page = await signedIn(chrome, forge.url, alice, "/");
    const link = page.getByRole("link", { name: "Opened in a new tab" });
    await link.waitFor();
    const opened = page.context().waitForEvent("page");
    await link.click({ button: "middle" });
    const tab = await opened;
    await tab.waitForLoadState();
    expect(new URL(tab.url()).pathname).toBe(`/threads/${thread}`);
    await tab.getByRole("heading", { name: "Opened in a new tab" }).waitFor();
    // The first tab did not follow the link itself.
    expect(new URL(page.url()).pathname).toBe("/");
    await page.getByRole("button", { name: "Sign out" }).click();
    await tab.getByRole("heading", { name: "Sign in" }).waitFor();
    await page.context().close();
  });

  it("explains an expired session and signs the same person in again, back to the same view", async () => {
    const thread = await newThread(forge, alice, "Expiring");
    const page = await signedIn(chrome, forge.url, shortToken("acme", "alice", ["finance"], 3), `/threads/${thread}`);
    await page.getByRole("heading", { name: "Expiring" }).waitFor();
    await page.getByRole("heading", { name: "Sign in" }).waitFor({ timeout: 30_000 });
    await page.getByText(/Your session as alice \(acme\) expired at/).waitFor();
    expect(await page.getByLabel("Principal").inputValue()).toBe("alice");
    expect(await page.getByLabel("Tenant").inputValue()).toBe("acme");
    expect(await page.getByLabel("Roles (comma separated)").inputValue()).toBe("finance");
    await axe(page, "sign-in after expiry");
    // A new tab of the same browser sees the same: signed out, and why.
    const other = await page.context().newPage();
    await other.goto(`${forge.url}/`);
    await other.getByText(/Your session as alice \(acme\) expired at/).waitFor();
    await other.close();
    await page.getByRole("button", { name: "Sign in for development" }).click();
    await page.waitForURL(`**/threads/${thread}`);
    await page.getByRole("heading", { name: "Expiring" }).waitFor();
    await page.context().close();
  });
});

// How long the console's runs list takes to show with 10,000 runs in the tenant: a server with
// no worker (the runs stay queued), 10,000 runs started over GraphQL, then the list opened cold
// in Chromium five times. Prints first contentful paint and the time until the first page of
// rows is on screen, median of five.

import { it } from "vitest";

import { Forge, browser } from "../tests/e2e/harness";

const RUNS = Number(process.env.RUNS ?? 10_000);

it(`the console's runs list with ${RUNS} runs`, async () => {
  // Room for 10,000 queued runs from one principal (the default fair-use limits refuse them).
  process.env.FORGE_TENANT_RUNS = String(RUNS + 100);
  process.env.FORGE_PRINCIPAL_SHARE = "1";
  const forge = await Forge.start({ noWorker: true });
  const chrome = await browser();
  try {
    const alice = await forge.token("acme", "alice", ["finance"]);
    const ada = await forge.token("acme", "ada", ["admin"]);
    const started = Date.now();
    const threads: string[] = [];
    for (let i = 0; i < 100; i++) {
      const t = await forge.gql<{ createThread: { id: string } }>(alice, "mutation { createThread { id } }");
      threads.push(t.createThread.id);
    }
    const start = (i: number) =>
      forge.gql(alice, "mutation($i: StartRunInput!) { startRun(input: $i) { id } }", {
        i: { threadId: threads[i % threads.length], agent: "calculator", message: `Sum ${i}`, strategy: "ENQUEUE" },
      });
    for (let i = 0; i < RUNS; i += 8) await Promise.all(Array.from({ length: Math.min(8, RUNS - i) }, (_, k) => start(i + k)));
    console.log(`started ${RUNS} runs in ${((Date.now() - started) / 1000).toFixed(1)} s`);
    const paints: number[] = [];
    const rows: number[] = [];
    for (let n = 0; n < 5; n++) {
      const context = await chrome.newContext();
      const page = await context.newPage();
      await page.goto(`${forge.url}/favicon.svg`);
      await page.evaluate((t) => localStorage.setItem("forge.token", t), ada);
      const t0 = Date.now();
      await page.goto(`${forge.url}/console/runs`);
      await page.locator("table.data tbody tr").nth(49).waitFor();
      rows.push(Date.now() - t0);
      paints.push(
        await page.evaluate(
          () => performance.getEntriesByName("first-contentful-paint")[0]?.startTime ?? Number.NaN,
        ),
      );
      await context.close();
    }
    const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
    console.log(
      `runs list, ${RUNS} runs in the tenant: first contentful paint ${median(paints).toFixed(0)} ms, ` +
        `first 50 rows shown ${median(rows)} ms (median of 5; each: ${rows.join(", ")} ms)`,
    );
  } finally {
    await chrome.close();
    await forge.stop();
  }
});

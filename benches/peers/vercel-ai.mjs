// The shared workload (shared/bench/WORKLOAD.md) on the Vercel AI SDK, against forge-bench's mock:
// streamed model calls, one `lookup` tool, 4 model calls a run. Prints one JSON line: median and
// p95 ms of 200 sequential runs, runs/s and CPU ms per run (this process) with 50 in flight.
// Usage: node vercel-ai.mjs [BASE_URL]
import { streamText, tool, stepCountIs } from 'ai';
import { createOpenAICompatible } from '@ai-sdk/openai-compatible';
import { z } from 'zod';

const base = process.argv[2] ?? 'http://127.0.0.1:47111/v1';
const provider = createOpenAICompatible({ name: 'mock', baseURL: base, includeUsage: true });
const model = provider('mock-steps-3');
const tools = {
  lookup: tool({
    description: 'Looks a key up.',
    inputSchema: z.object({ key: z.string() }),
    execute: async () => 'value',
  }),
};
let calls = 0;
async function run() {
  const r = streamText({
    model, tools, stopWhen: stepCountIs(10),
    system: 'You look keys up.', prompt: 'Look three keys up.',
  });
  const text = await r.text;
  const steps = await r.steps;
  calls += steps.length;
  if (!text) throw new Error('no text');
}
for (let i = 0; i < 20; i++) await run();
const lat = [];
for (let i = 0; i < 200; i++) { const t = process.hrtime.bigint(); await run(); lat.push(Number(process.hrtime.bigint() - t) / 1e6); }
lat.sort((a, b) => a - b);
calls = 0;
const N = 1000, inflight = 50;
const cpu0 = process.cpuUsage(); const t0 = process.hrtime.bigint();
let next = 0;
await Promise.all(Array.from({ length: inflight }, async () => { while (next < N) { next++; await run(); } }));
const secs = Number(process.hrtime.bigint() - t0) / 1e9; const cpu = process.cpuUsage(cpu0);
console.log(JSON.stringify({ peer: 'vercel-ai-sdk', p50_ms: lat[100], p95_ms: lat[190], runs_per_s: N / secs,
  cpu_ms_per_run: (cpu.user + cpu.system) / 1000 / N, model_calls_per_run: calls / N,
  rss_mib: process.memoryUsage().rss / 1048576 }));

// The inspector's timings read from a run's own events: each step's model latency (to its usage
// report) and time to first token (to its first streamed part), steps kept apart.

import { describe, expect, it } from "vitest";

import { stepTimes, steps } from "./timing";

const at = (ms: number) => new Date(Date.UTC(2026, 11, 7, 12, 0, 0) + ms).toISOString();
const ev = (seq: number, ms: number, type: string, event: Record<string, unknown> = {}) => ({ seq, at: at(ms), type, event });

describe("stepTimes", () => {
  it("measures each step from its start to its first part and its usage report", () => {
    const times = stepTimes([
      ev(1, 0, "run.started"),
      ev(2, 100, "step.started", { step: 1 }),
      ev(3, 350, "part.added", { part: { type: "text" } }),
      ev(4, 400, "part.updated"),
      ev(5, 900, "usage.updated", { step: 1 }),
      ev(6, 950, "part.added", { part: { type: "tool_result" } }),
      ev(7, 1000, "step.started", { step: 2 }),
      ev(8, 1600, "usage.updated", { step: 2 }),
      ev(9, 1700, "part.added", { part: { type: "text" } }),
    ]);
    expect(times.get(1)).toEqual({ firstToken: 250, model: 800 });
    // A step whose call streamed nothing before its report: the tool result after it is no token.
    expect(times.get(2)).toEqual({ model: 600 });
    expect(times.has(3)).toBe(false);
  });

  it("spans each step to the next step's start, the last to the run's last event", () => {
    const spans = steps([ev(1, 0, "run.started"), ev(2, 100, "step.started", { step: 1 }), ev(3, 700, "step.started", { step: 2 }), ev(4, 1000, "run.completed")]);
    expect(spans.map((s) => [s.step, s.end - s.start])).toEqual([
      [1, 600],
      [2, 300],
    ]);
  });

  it("ignores events before the first step", () => {
    expect(stepTimes([ev(1, 0, "run.started"), ev(2, 5, "part.added")]).size).toBe(0);
  });
});

// Timings read from a run's own committed events, for the run inspector: each step's span and
// its model call's latency and time to first token. Pure functions, tested without a page.

/** An event as the inspector reads it. */
export interface Event {
  seq: number;
  at: string;
  type: string;
  event: Record<string, unknown>;
}

/**
 * Each step's model timings from its committed events: the time to the first streamed part
 * (`firstToken`) and to its usage report (`model`, the call's latency), in ms after `step.started`.
 */
export function stepTimes(events: Event[]): Map<number, { firstToken?: number; model?: number }> {
  const at = (e: Event) => new Date(e.at).getTime();
  const out = new Map<number, { firstToken?: number; model?: number }>();
  let step = 0;
  let start = 0;
  for (const e of events) {
    if (e.type === "step.started") {
      step = Number(e.event.step);
      start = at(e);
      out.set(step, {});
      continue;
    }
    const times = out.get(step);
    if (!times) continue;
    if ((e.type === "part.added" || e.type === "part.updated") && times.firstToken === undefined && times.model === undefined) {
      times.firstToken = at(e) - start;
    }
    if (e.type === "usage.updated" && Number(e.event.step) === step && times.model === undefined) {
      times.model = at(e) - start;
    }
  }
  return out;
}

/** Each step's span, from its `step.started` to the next step's (or the run's last event). */
export function steps(events: Event[]): { step: number; start: number; end: number }[] {
  const at = (e: Event) => new Date(e.at).getTime();
  const starts = events.filter((e) => e.type === "step.started");
  const end = events.length ? at(events[events.length - 1]) : 0;
  return starts.map((e, i) => ({
    step: Number(e.event.step),
    start: at(e),
    end: i + 1 < starts.length ? at(starts[i + 1]) : end,
  }));
}

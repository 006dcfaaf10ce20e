// The tenant's model usage per UTC day and model: a chart of cost per day (uPlot) and the table
// it is drawn from, with totals; the same days per agent version, the most expensive runs, and
// the quota's use in the current period. The chart carries its series as data too, so what it
// draws can be checked against the usage API.

import "uplot/dist/uPlot.min.css";

import type { Api } from "@forge/client";
import { type FormEvent, useEffect, useMemo, useRef, useState } from "react";
import uPlot from "uplot";

import { gql } from "../api";
import { money } from "../text";
import { Go, Scroll, ShortId, States, dayStart, useLoad, useSearch } from "./common";

interface Rollup {
  day: string;
  currency: string;
  totals: {
    model: string;
    calls: number;
    cost_micros: number;
    usage: { input_tokens: number; output_tokens: number };
  };
}

const USAGE = `query Usage($from: String!, $to: String!) {
  usage(from: $from, to: $to) { day currency totals }
  usageBreakdown(from: $from, to: $to, top: 10) {
    currency
    agents { agentName agentVersion runs calls inputTokens outputTokens costMicros }
    topRuns { runId calls inputTokens outputTokens costMicros run { agentName agentVersion status } }
    quota { period periodStart maxTokens maxCostMicros tokens costMicros }
  }
}`;

/** The breakdown as the query selects it (the generated types, a run's fields narrowed). */
type Breakdown = Omit<Api.UsageBreakdown, "topRuns"> & {
  topRuns: (Omit<Api.RunCost, "run"> & { run: Pick<Api.Run, "agentName" | "agentVersion" | "status"> | null })[];
};

/** How much of a cap is used, as a whole percentage (capped at 100 for the bar). */
function share(used: number, max: number): number {
  return max <= 0 ? 100 : Math.min(100, Math.round((used / max) * 100));
}

function Quota({ quota, currency }: { quota: NonNullable<Breakdown["quota"]>; currency: string }) {
  const caps: { label: string; used: number; max: number; shown: (n: number) => string }[] = [];
  if (quota.maxTokens !== null) caps.push({ label: "Tokens", used: quota.tokens, max: quota.maxTokens, shown: String });
  if (quota.maxCostMicros !== null)
    caps.push({ label: "Cost", used: quota.costMicros, max: quota.maxCostMicros, shown: (n) => money(n, currency) });
  return (
    <section aria-labelledby="quota-heading" className="card">
      <h3 id="quota-heading">Quota this {quota.period}</h3>
      <p className="muted">Since {quota.periodStart.slice(0, 10)} (UTC); a model call that would pass a cap is refused.</p>
      {caps.length === 0 ? <p>No cap is set.</p> : null}
      {caps.map((c) => (
        <p key={c.label}>
          <label>
            {c.label}: {c.shown(c.used)} of {c.shown(c.max)} ({share(c.used, c.max)}%){" "}
            <meter min={0} max={c.max} value={Math.min(c.used, c.max)} high={c.max * 0.8} optimum={0} />
          </label>
        </p>
      ))}
    </section>
  );
}

function PerAgent({ b }: { b: Breakdown }) {
  return (
    <section aria-labelledby="agents-heading">
      <h3 id="agents-heading">Per agent version</h3>
      <Scroll label="Usage per agent table">
        <table className="data agents-table">
          <thead>
            <tr>
              <th scope="col">Agent</th>
              <th scope="col">Runs</th>
              <th scope="col">Calls</th>
              <th scope="col">Tokens in</th>
              <th scope="col">Tokens out</th>
              <th scope="col">Cost</th>
            </tr>
          </thead>
          <tbody>
            {b.agents.map((a) => (
              <tr key={`${a.agentName} ${a.agentVersion}`}>
                <td>
                  {a.agentName} {a.agentVersion ? <span className="muted">v{a.agentVersion}</span> : null}
                </td>
                <td className="num">{a.runs}</td>
                <td className="num">{a.calls}</td>
                <td className="num">{a.inputTokens}</td>
                <td className="num">{a.outputTokens}</td>
                <td className="num">{money(a.costMicros, b.currency)}</td>
              </tr>
            ))}
          </tbody>
        </table>
      </Scroll>
    </section>
  );
}

function TopRuns({ b }: { b: Breakdown }) {
  return (
    <section aria-labelledby="top-heading">
      <h3 id="top-heading">Most expensive runs</h3>
      <Scroll label="Most expensive runs table">
        <table className="data top-runs">
          <thead>
            <tr>
              <th scope="col">Run</th>
              <th scope="col">Agent</th>
              <th scope="col">State</th>
              <th scope="col">Calls</th>
              <th scope="col">Tokens in / out</th>
              <th scope="col">Cost</th>
            </tr>
          </thead>
          <tbody>
            {b.topRuns.map((r) => (
              <tr key={r.runId}>
                <td>
                  {r.run ? (
                    <Go to={`/console/runs/${r.runId}`}>
                      <ShortId id={r.runId} />
                    </Go>
                  ) : (
                    <ShortId id={r.runId} />
                  )}
                </td>
                <td>{r.run ? `${r.run.agentName} v${r.run.agentVersion}` : "(erased)"}</td>
                <td>{r.run ? <span className={`badge ${r.run.status}`}>{r.run.status}</span> : null}</td>
                <td className="num">{r.calls}</td>
                <td className="num">
                  {r.inputTokens} / {r.outputTokens}
                </td>
                <td className="num">{money(r.costMicros, b.currency)}</td>
              </tr>
            ))}
          </tbody>
        </table>
      </Scroll>
    </section>
  );
}

/** `YYYY-MM-DD` of a UTC day `offset` days from today. */
function day(offset: number): string {
  const d = new Date();
  d.setUTCDate(d.getUTCDate() + offset);
  return d.toISOString().slice(0, 10);
}

/** Each day's cost from `from` to `to` (UTC days, both included) in micro-units, summed over models. */
export function dailyCost(rollups: Rollup[], from: string, to: string): { days: string[]; micros: number[] } {
  const by = new Map<string, number>();
  for (const r of rollups) {
    const d = r.day.slice(0, 10);
    by.set(d, (by.get(d) ?? 0) + r.totals.cost_micros);
  }
  const days: string[] = [];
  const at = new Date(`${from}T00:00:00Z`);
  const end = new Date(`${to}T00:00:00Z`);
  while (at <= end && days.length < 366) {
    days.push(at.toISOString().slice(0, 10));
    at.setUTCDate(at.getUTCDate() + 1);
  }
  return { days, micros: days.map((d) => by.get(d) ?? 0) };
}

function CostChart({ rollups, currency, from, to }: { rollups: Rollup[]; currency: string; from: string; to: string }) {
  const box = useRef<HTMLDivElement>(null);
  const series = useMemo(() => dailyCost(rollups, from, to), [rollups, from, to]);
  useEffect(() => {
    const el = box.current;
    if (!el || series.days.length === 0) return;
    const xs = series.days.map((d) => Date.parse(`${d}T00:00:00Z`) / 1000);
    const plot = new uPlot(
      {
        width: Math.max(280, el.clientWidth),
        height: 220,
        legend: { show: false },
        // Half a day either side, so that the first and last bars have room.
        scales: { x: { time: true, range: (_u, min, max) => [min - 43_200, max + 43_200] } },
        series: [
          {},
          {
            label: `Cost (${currency})`,
            stroke: "#0b5cad",
            fill: "rgba(11, 92, 173, 0.55)",
            paths: uPlot.paths.bars?.({ size: [0.6, 48] }),
            points: { show: false },
            value: (_u, v) => (v === null ? "" : money(v * 1_000_000, currency)),
          },
        ],
        axes: [{}, { values: (_u, ticks) => ticks.map((v) => money(v * 1_000_000, currency)), size: 80 }],
      },
      [xs, series.micros.map((m) => m / 1_000_000)],
      el,
    );
    return () => plot.destroy();
  }, [series, currency]);
  const total = series.micros.reduce((a, b) => a + b, 0);
  return (
    <figure className="chart">
      <div
        ref={box}
        role="img"
        aria-label={`Cost per day, ${series.days.length} days, ${money(total, currency)} in all`}
        data-days={JSON.stringify(series.days)}
        data-micros={JSON.stringify(series.micros)}
      />
      <figcaption className="muted">Cost per UTC day, every model; the table below has each day and model.</figcaption>
    </figure>
  );
}

export function Usage({ search }: { search: string }) {
  const [params, setParams] = useSearch(search);
  const from = params.get("from") ?? day(-29);
  const to = params.get("to") ?? day(0);
  const [form, setForm] = useState({ from, to });
  useEffect(() => setForm({ from, to }), [from, to]);
  const { value, error, loading } = useLoad(() => {
    // `to` is the last day shown: the API's range ends before the next day.
    return gql<{ usage: Rollup[]; usageBreakdown: Breakdown }>(USAGE, { from: dayStart(from), to: dayStart(to, 1) });
  }, [from, to]);
  const rollups = value?.usage ?? [];
  const breakdown = value?.usageBreakdown;
  const currency = rollups[0]?.currency ?? "USD";
  const sum = (f: (r: Rollup) => number) => rollups.reduce((n, r) => n + f(r), 0);
  const apply = (e: FormEvent) => {
    e.preventDefault();
    setParams({ from: form.from || null, to: form.to || null });
  };
  return (
    <section aria-labelledby="usage-heading">
      <h2 id="usage-heading">Usage and cost</h2>
      <form className="row card filters" onSubmit={apply} aria-label="Choose the days">
        <label htmlFor="usage-from">From (UTC day)</label>
        <input id="usage-from" type="date" value={form.from} onChange={(e) => setForm({ ...form, from: e.target.value })} />
        <label htmlFor="usage-to">To (UTC day)</label>
        <input id="usage-to" type="date" value={form.to} onChange={(e) => setForm({ ...form, to: e.target.value })} />
        <button type="submit">Show</button>
      </form>
      {breakdown?.quota ? <Quota quota={breakdown.quota} currency={breakdown.currency} /> : null}
      <States loading={loading} error={error} empty={rollups.length === 0} what="usage in these days" />
      {rollups.length > 0 && (
        <>
          <CostChart rollups={rollups} currency={currency} from={from} to={to} />
          <Scroll label="Usage per day and model table">
            <table className="data usage-table">
              <thead>
                <tr>
                  <th scope="col">Day</th>
                  <th scope="col">Model</th>
                  <th scope="col">Calls</th>
                  <th scope="col">Tokens in</th>
                  <th scope="col">Tokens out</th>
                  <th scope="col">Cost</th>
                </tr>
              </thead>
              <tbody>
                {rollups.map((r) => (
                  <tr key={`${r.day} ${r.totals.model}`}>
                    <td>{r.day.slice(0, 10)}</td>
                    <td>{r.totals.model}</td>
                    <td className="num">{r.totals.calls}</td>
                    <td className="num">{r.totals.usage.input_tokens}</td>
                    <td className="num">{r.totals.usage.output_tokens}</td>
                    <td className="num">{money(r.totals.cost_micros, r.currency)}</td>
                  </tr>
                ))}
              </tbody>
              <tfoot>
                <tr>
                  <th scope="row" colSpan={2}>
                    All
                  </th>
                  <td className="num">{sum((r) => r.totals.calls)}</td>
                  <td className="num">{sum((r) => r.totals.usage.input_tokens)}</td>
                  <td className="num">{sum((r) => r.totals.usage.output_tokens)}</td>
                  <td className="num">{money(sum((r) => r.totals.cost_micros), currency)}</td>
                </tr>
              </tfoot>
            </table>
          </Scroll>
          {breakdown && breakdown.agents.length > 0 ? <PerAgent b={breakdown} /> : null}
          {breakdown && breakdown.topRuns.length > 0 ? <TopRuns b={breakdown} /> : null}
        </>
      )}
    </section>
  );
}

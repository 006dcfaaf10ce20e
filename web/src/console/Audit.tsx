// The tenant's audit trail, newest first: who did what to what, filtered by action (a prefix such
// as `approval.` or `config.`), subject, actor and days, kept in the address bar.

import { type FormEvent, useEffect, useState } from "react";

import { gql } from "../api";
import { cut } from "../text";
import { Go, Scroll, States, When, useLoad, useSearch } from "./common";

interface Record_ {
  at: string;
  actor: string;
  action: string;
  subject: string;
  detail: unknown;
}

const AUDIT = `query Audit($action: String, $subject: String, $actor: String, $since: String, $until: String) {
  auditRecords(action: $action, subject: $subject, actor: $actor, since: $since, until: $until, limit: 200)
}`;

const FIELDS = ["action", "subject", "actor", "since", "until"] as const;
type Field = (typeof FIELDS)[number];

export function Audit({ search }: { search: string }) {
  const [params, setParams] = useSearch(search);
  const key = params.toString();
  const shown = (): Record<Field, string> =>
    Object.fromEntries(FIELDS.map((f) => [f, params.get(f) ?? ""])) as Record<Field, string>;
  const [form, setForm] = useState(shown);
  useEffect(() => setForm(shown()), [key]);
  const { value, error, loading } = useLoad(() => {
    const get = (f: Field) => params.get(f)?.trim() || undefined;
    // Days are UTC and both included.
    const day = (d: string | undefined, plus: number) => {
      if (!d) return undefined;
      const at = new Date(`${d}T00:00:00Z`);
      at.setUTCDate(at.getUTCDate() + plus);
      return at.toISOString();
    };
    return gql<{ auditRecords: Record_[] }>(AUDIT, {
      action: get("action"),
      subject: get("subject"),
      actor: get("actor"),
      since: day(get("since"), 0),
      until: day(get("until"), 1),
    });
  }, [key]);
  const records = value?.auditRecords ?? [];
  const apply = (e: FormEvent) => {
    e.preventDefault();
    setParams(Object.fromEntries(FIELDS.map((f) => [f, form[f].trim() || null])));
  };
  const field = (f: Field) => ({
    id: `audit-${f}`,
    value: form[f],
    onChange: (e: { target: { value: string } }) => setForm({ ...form, [f]: e.target.value }),
  });
  return (
    <section aria-labelledby="audit-heading">
      <h2 id="audit-heading">Audit trail</h2>
      <form className="row card filters" onSubmit={apply} aria-label="Filter the audit trail">
        <label htmlFor="audit-action">Action starts with</label>
        <input {...field("action")} />
        <label htmlFor="audit-subject">Subject</label>
        <input {...field("subject")} />
        <label htmlFor="audit-actor">Who</label>
        <input {...field("actor")} size={14} />
        <label htmlFor="audit-since">From (UTC day)</label>
        <input type="date" {...field("since")} />
        <label htmlFor="audit-until">To (UTC day)</label>
        <input type="date" {...field("until")} />
        <button type="submit">Filter</button>
      </form>
      <States loading={loading} error={error} empty={records.length === 0} what="audit records" />
      {records.length > 0 && (
        <Scroll label="Audit records table">
          <table className="data">
            <thead>
              <tr>
                <th scope="col">When</th>
                <th scope="col">Who</th>
                <th scope="col">Action</th>
                <th scope="col">Subject</th>
                <th scope="col">Detail</th>
              </tr>
            </thead>
            <tbody>
              {records.map((r, i) => (
                <tr key={i}>
                  <td>
                    <When at={r.at} />
                  </td>
                  <td>
                    <Go to={`/console/audit?actor=${encodeURIComponent(r.actor)}`}>{r.actor}</Go>
                  </td>
                  <td>
                    <code>{r.action}</code>
                  </td>
                  <td>
                    <code>{r.subject}</code>
                  </td>
                  <td className="detail">{cut(JSON.stringify(r.detail ?? null), 200)}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </Scroll>
      )}
    </section>
  );
}

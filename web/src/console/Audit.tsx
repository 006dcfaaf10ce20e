// The tenant's audit trail, newest first: who did what to what, filtered by action (a prefix such
// as `approval.` or `config.`), subject and time, kept in the address bar.

import { type FormEvent, useEffect, useState } from "react";

import { gql } from "../api";
import { cut } from "../text";
import { Scroll, States, When, useLoad, useSearch } from "./common";

interface Record_ {
  at: string;
  actor: string;
  action: string;
  subject: string;
  detail: unknown;
}

const AUDIT = `query Audit($action: String, $subject: String, $since: String) {
  auditRecords(action: $action, subject: $subject, since: $since, limit: 200)
}`;

export function Audit({ search }: { search: string }) {
  const [params, setParams] = useSearch(search);
  const action = params.get("action") ?? "";
  const subject = params.get("subject") ?? "";
  const since = params.get("since") ?? "";
  const [form, setForm] = useState({ action, subject, since });
  useEffect(() => setForm({ action, subject, since }), [action, subject, since]);
  const { value, error, loading } = useLoad(
    () =>
      gql<{ auditRecords: Record_[] }>(AUDIT, {
        action: action || undefined,
        subject: subject || undefined,
        since: since ? new Date(`${since}T00:00:00Z`).toISOString() : undefined,
      }),
    [action, subject, since],
  );
  const records = value?.auditRecords ?? [];
  const apply = (e: FormEvent) => {
    e.preventDefault();
    setParams({ action: form.action.trim() || null, subject: form.subject.trim() || null, since: form.since || null });
  };
  return (
    <section aria-labelledby="audit-heading">
      <h2 id="audit-heading">Audit trail</h2>
      <form className="row card filters" onSubmit={apply} aria-label="Filter the audit trail">
        <label htmlFor="audit-action">Action starts with</label>
        <input id="audit-action" value={form.action} onChange={(e) => setForm({ ...form, action: e.target.value })} />
        <label htmlFor="audit-subject">Subject</label>
        <input id="audit-subject" value={form.subject} onChange={(e) => setForm({ ...form, subject: e.target.value })} />
        <label htmlFor="audit-since">Since (UTC day)</label>
        <input id="audit-since" type="date" value={form.since} onChange={(e) => setForm({ ...form, since: e.target.value })} />
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
                  <td>{r.actor}</td>
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

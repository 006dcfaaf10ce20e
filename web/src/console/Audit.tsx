// The tenant's audit trail, newest first: who did what to what, filtered by action (a prefix such
// as `approval.` or `config.`), subject, actor and days, kept in the address bar.

import { gql } from "../api";
import { cut } from "../text";
import { Go, Scroll, States, When, dayStart, useFilterForm, useLoad, useSearch } from "./common";

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

export function Audit({ search }: { search: string }) {
  const [params, setParams] = useSearch(search);
  const key = params.toString();
  const { field, apply } = useFilterForm(params, setParams, FIELDS);
  const { value, error, loading } = useLoad(() => {
    const get = (f: (typeof FIELDS)[number]) => params.get(f)?.trim() || undefined;
    return gql<{ auditRecords: Record_[] }>(AUDIT, {
      action: get("action"),
      subject: get("subject"),
      actor: get("actor"),
      since: dayStart(get("since")),
      until: dayStart(get("until"), 1),
    });
  }, [key]);
  const records = value?.auditRecords ?? [];
  const input = (f: (typeof FIELDS)[number]) => ({ id: `audit-${f}`, ...field(f) });
  return (
    <section aria-labelledby="audit-heading">
      <h2 id="audit-heading">Audit trail</h2>
      <form className="row card filters" onSubmit={apply} aria-label="Filter the audit trail">
        <label htmlFor="audit-action">Action starts with</label>
        <input {...input("action")} />
        <label htmlFor="audit-subject">Subject</label>
        <input {...input("subject")} />
        <label htmlFor="audit-actor">Who</label>
        <input {...input("actor")} size={14} />
        <label htmlFor="audit-since">From (UTC day)</label>
        <input type="date" {...input("since")} />
        <label htmlFor="audit-until">To (UTC day)</label>
        <input type="date" {...input("until")} />
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

// What every console screen shares: loading, empty and error states, a link that stays a link,
// times and ids shown for people, the search parameters that keep a screen's filters in the
// address bar, and the filter form over them.

import { type FormEvent, type ReactNode, useCallback, useEffect, useMemo, useState } from "react";

import { describe } from "../api";
import { follow, navigate } from "../router";

/** A screen's data: loading, then the value or why it failed; `reload` asks again. */
export function useLoad<T>(load: () => Promise<T>, deps: unknown[]): {
  value: T | null;
  error: string | null;
  loading: boolean;
  reload: () => void;
} {
  const [value, setValue] = useState<T | null>(null);
  const [error, setError] = useState<string | null>(null);
  const [loading, setLoading] = useState(true);
  const [tick, setTick] = useState(0);
  useEffect(() => {
    let live = true;
    setLoading(true);
    load()
      .then((v) => {
        if (!live) return;
        setValue(v);
        setError(null);
      })
      .catch((e) => live && setError(describe(e)))
      .finally(() => live && setLoading(false));
    return () => {
      live = false;
    };
  }, [...deps, tick]);
  const reload = useCallback(() => setTick((t) => t + 1), []);
  return { value, error, loading, reload };
}

/** The loading, error and empty states every screen shows the same way. */
export function States({
  loading,
  error,
  empty,
  what,
}: {
  loading: boolean;
  error: string | null;
  empty: boolean;
  what: string;
}) {
  if (error) {
    return (
      <p role="alert" className="error">
        Could not load {what}: {error}
      </p>
    );
  }
  if (loading && empty) return <p className="muted" role="status">Loading {what}…</p>;
  if (empty) return <p className="muted">No {what} yet.</p>;
  return null;
}

/** A link inside the page (a new tab when asked for one). */
export function Go({
  to,
  children,
  label,
  current,
}: {
  to: string;
  children: ReactNode;
  label?: string;
  /** This link is the page shown. */
  current?: boolean;
}) {
  return (
    <a href={to} onClick={(e) => follow(e, to)} aria-label={label} aria-current={current ? "page" : undefined}>
      {children}
    </a>
  );
}

/** A time as people read it, with the exact instant on hover. */
export function When({ at }: { at: string }) {
  const d = new Date(at);
  return <time dateTime={at} title={at}>{Number.isNaN(d.getTime()) ? at : d.toLocaleString()}</time>;
}

/** An id shortened to its last characters (the whole one on hover). */
export function ShortId({ id }: { id: string }) {
  return (
    <code className="short-id" title={id}>
      …{id.slice(-8)}
    </code>
  );
}

/**
 * The screen's search parameters (`search`, the route's query string) and a way to change them,
 * kept in the address bar (replacing the entry: filters are not a step back).
 */
export function useSearch(search: string): [URLSearchParams, (change: Record<string, string | null>) => void] {
  const params = useMemo(() => new URLSearchParams(search), [search]);
  const set = useCallback(
    (change: Record<string, string | null>) => {
      const next = new URLSearchParams(params);
      for (const [k, v] of Object.entries(change)) {
        if (v === null || v === "") next.delete(k);
        else next.set(k, v);
      }
      const q = next.toString();
      navigate(`${location.pathname}${q ? `?${q}` : ""}`, true);
    },
    [params],
  );
  return [params, set];
}

/** A table's box, scrolled sideways on a narrow screen: focusable, so the keyboard scrolls it too. */
export function Scroll({ label, children }: { label: string; children: ReactNode }) {
  return (
    <div className="table-wrap" tabIndex={0} role="region" aria-label={label}>
      {children}
    </div>
  );
}

/**
 * The start of UTC day `day` (`YYYY-MM-DD`) `plus` days later, as RFC 3339; `undefined` without a
 * day. A filter's days are UTC and both included: its API window is `[dayStart(from),
 * dayStart(to, 1))`.
 */
export function dayStart(day: string | undefined, plus = 0): string | undefined {
  if (!day) return undefined;
  const at = new Date(`${day}T00:00:00Z`);
  at.setUTCDate(at.getUTCDate() + plus);
  return at.toISOString();
}

/**
 * A filter form over the address bar's `fields`: what each input shows (kept in step with the
 * address when it changes), and `apply` to write the form back to the address (blank fields
 * removed).
 */
export function useFilterForm<F extends string>(
  params: URLSearchParams,
  setParams: (change: Record<string, string | null>) => void,
  fields: readonly F[],
): { field: (f: F) => { value: string; onChange: (e: { target: { value: string } }) => void }; apply: (e: FormEvent) => void } {
  const key = params.toString();
  const shown = () => Object.fromEntries(fields.map((f) => [f, params.get(f) ?? ""])) as Record<F, string>;
  const [form, setForm] = useState(shown);
  // The form follows the address (whose text `key` is) when it changes.
  useEffect(() => setForm(shown()), [key]);
  return {
    field: (f) => ({ value: form[f], onChange: (e) => setForm({ ...form, [f]: e.target.value }) }),
    apply: (e) => {
      e.preventDefault();
      setParams(Object.fromEntries(fields.map((f) => [f, form[f].trim() || null])));
    },
  };
}

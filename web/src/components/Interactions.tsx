import { type FormEvent, useRef, useState } from "react";

import {
  type ApprovalPreview,
  type ApprovalView,
  diffLines,
  type JsonValue,
  newKey,
  type QuestionView,
} from "@forge/client";

import { ApiError, describe, forge } from "../api";

/** Why a decision or answer was refused; a conflict means another person acted first. */
function refusal(e: unknown): string {
  return e instanceof ApiError && e.code === "CONFLICT" ? `Someone else got there first: ${e.message}` : describe(e);
}

/** A flat object's fields as a list a person reads; anything else as nothing (the JSON shows). */
function Fields({ input }: { input: JsonValue | undefined }) {
  if (input === null || input === undefined || typeof input !== "object" || Array.isArray(input)) return null;
  const rows = Object.entries(input).filter(([, v]) => v === null || typeof v !== "object");
  if (!rows.length) return null;
  return (
    <dl className="fields">
      {rows.map(([k, v]) => (
        <div key={k}>
          <dt>{k.replace(/_/g, " ")}</dt>
          <dd>{String(v)}</dd>
        </div>
      ))}
    </dl>
  );
}

/**
 * What the tool says the call will do: a summary, the facts the decision rests on, and the text
 * it replaces as a line diff (removed lines marked `-`, added `+`, both readable without colour).
 */
function Preview({ preview }: { preview: ApprovalPreview }) {
  const change = preview.change ? diffLines(preview.change.before, preview.change.after) : null;
  return (
    <div className="preview">
      <p className="preview-summary">{preview.summary}</p>
      {preview.facts && preview.facts.length > 0 && (
        <dl className="facts">
          {preview.facts.map((f, i) => (
            <div key={i}>
              <dt>{f.label}</dt>
              <dd>{f.value}</dd>
            </div>
          ))}
        </dl>
      )}
      {change && (
        <pre className="diff" aria-label="The change, line by line">
          {change.map((line, i) =>
            line.kind === "removed" ? (
              <del key={i}>{`- ${line.text}`}</del>
            ) : line.kind === "added" ? (
              <ins key={i}>{`+ ${line.text}`}</ins>
            ) : (
              <span key={i}>{`  ${line.text}`}</span>
            ),
          )}
        </pre>
      )}
    </div>
  );
}

/**
 * An approval: what the tool says the call will do (when it has a previewer), the exact input
 * the call will run with, and approve / reject. One idempotency
 * key per card: a double click, or a retry after a lost answer, repeats the same decision; the
 * buttons are disabled from the first click.
 */
export function ApprovalCard({
  approval,
  input,
  mayDecide,
  decided,
}: {
  approval: ApprovalView;
  input: JsonValue | undefined;
  mayDecide: boolean;
  decided: boolean;
}) {
  const key = useRef(newKey());
  const [state, setState] = useState<"idle" | "sending" | "approved" | "rejected">("idle");
  const [error, setError] = useState<string | null>(null);

  const decide = async (approve: boolean) => {
    if (state !== "idle") return;
    setState("sending");
    setError(null);
    try {
      await forge.resolveApproval(approval.interactionId, {
        approve,
        key: key.current,
        inputHash: approval.inputHash,
        reason: approve ? undefined : "rejected in the web client",
      });
      setState(approve ? "approved" : "rejected");
    } catch (e) {
      setError(refusal(e));
      setState("idle");
    }
  };

  const heading = `Approve ${approval.toolName}?`;
  return (
    <section className="approval card" aria-label={heading}>
      <h3>{heading}</h3>
      {approval.preview && <Preview preview={approval.preview} />}
      <p className="muted">It will run with exactly this input:</p>
      {/* The tool's own preview says it in the application's terms; without one, the fields. */}
      {!approval.preview && <Fields input={input} />}
      <details className="exact">
        <summary>The input as the tool receives it</summary>
        <pre className="json">{JSON.stringify(input ?? null, null, 2)}</pre>
      </details>
      {state === "approved" || state === "rejected" ? (
        <p role="status">{state === "approved" ? "You approved it." : "You rejected it."}</p>
      ) : decided ? (
        <p className="muted">Decided.</p>
      ) : mayDecide ? (
        <div className="row">
          <button type="button" onClick={() => void decide(true)} disabled={state !== "idle"}>
            Approve
          </button>
          <button
            type="button"
            className="secondary"
            onClick={() => void decide(false)}
            disabled={state !== "idle"}
          >
            Reject
          </button>
        </div>
      ) : (
        <p className="muted">Waiting for someone who may approve it.</p>
      )}
      {error && (
        <p role="alert" className="error">
          {error}
        </p>
      )}
    </section>
  );
}

type Schema = {
  type?: string;
  enum?: JsonValue[];
  properties?: Record<string, Schema>;
  required?: string[];
  title?: string;
  description?: string;
};

/** One input for a schema of one value. */
function Field({
  id,
  label,
  schema,
  value,
  onChange,
}: {
  id: string;
  label: string;
  schema: Schema;
  value: string;
  onChange: (v: string) => void;
}) {
  if (schema.enum) {
    return (
      <>
        <label htmlFor={id}>{label}</label>
        <select id={id} value={value} onChange={(e) => onChange(e.target.value)}>
          <option value="">Choose…</option>
          {schema.enum.map((v) => (
            <option key={JSON.stringify(v)} value={JSON.stringify(v)}>
              {String(v)}
            </option>
          ))}
        </select>
      </>
    );
  }
  if (schema.type === "boolean") {
    return (
      <label className="check" htmlFor={id}>
        <input
          id={id}
          type="checkbox"
          checked={value === "true"}
          onChange={(e) => onChange(e.target.checked ? "true" : "false")}
        />
        {label}
      </label>
    );
  }
  const numeric = schema.type === "integer" || schema.type === "number";
  return (
    <>
      <label htmlFor={id}>{label}</label>
      <input
        id={id}
        type={numeric ? "number" : "text"}
        step={schema.type === "integer" ? 1 : "any"}
        value={value}
        onChange={(e) => onChange(e.target.value)}
      />
    </>
  );
}

function parseValue(schema: Schema, raw: string): JsonValue {
  if (schema.enum) return raw === "" ? null : (JSON.parse(raw) as JsonValue);
  switch (schema.type) {
    case "integer":
    case "number":
      return raw === "" ? null : Number(raw);
    case "boolean":
      return raw === "true";
    case "string":
      return raw;
    default:
      return JSON.parse(raw) as JsonValue;
  }
}

/** A question's form, generated from its answer schema (a value, or an object of values). */
export function QuestionForm({ question }: { question: QuestionView }) {
  const schema = (question.answerSchema ?? {}) as Schema;
  const key = useRef(newKey());
  const isObject = schema.type === "object" && schema.properties;
  const simple = !isObject && ["string", "integer", "number", "boolean"].includes(schema.type ?? "") || !!schema.enum;
  const [values, setValues] = useState<Record<string, string>>({});
  const [sent, setSent] = useState(false);
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<string | null>(null);

  const answer = (): JsonValue => {
    if (isObject && schema.properties) {
      const out: Record<string, JsonValue> = {};
      for (const [name, s] of Object.entries(schema.properties)) {
        const raw = values[name] ?? "";
        if (raw === "" && !(schema.required ?? []).includes(name)) continue;
        out[name] = parseValue(s, raw);
      }
      return out;
    }
    if (simple) return parseValue(schema, values.answer ?? "");
    return JSON.parse(values.answer ?? "null") as JsonValue;
  };

  const submit = async (e: FormEvent) => {
    e.preventDefault();
    if (busy || sent) return;
    setBusy(true);
    setError(null);
    try {
      await forge.answerQuestion(question.interactionId, answer(), key.current);
      setSent(true);
    } catch (err) {
      setError(err instanceof SyntaxError ? "The answer is not valid JSON." : refusal(err));
    } finally {
      setBusy(false);
    }
  };

  const id = `q-${question.interactionId}`;
  return (
    <form className="question card" onSubmit={submit} aria-label={question.prompt}>
      <h3>{question.prompt}</h3>
      {isObject && schema.properties ? (
        Object.entries(schema.properties).map(([name, s]) => (
          <Field
            key={name}
            id={`${id}-${name}`}
            label={s.title ?? name}
            schema={s}
            value={values[name] ?? ""}
            onChange={(v) => setValues((old) => ({ ...old, [name]: v }))}
          />
        ))
      ) : simple ? (
        <Field
          id={id}
          label="Answer"
          schema={schema}
          value={values.answer ?? ""}
          onChange={(v) => setValues({ answer: v })}
        />
      ) : (
        <>
          <label htmlFor={id}>Answer (JSON)</label>
          <textarea
            id={id}
            rows={3}
            value={values.answer ?? ""}
            onChange={(e) => setValues({ answer: e.target.value })}
          />
        </>
      )}
      {sent ? (
        <p role="status">Answered.</p>
      ) : (
        <button type="submit" disabled={busy}>
          Answer
        </button>
      )}
      {error && (
        <p role="alert" className="error">
          {error}
        </p>
      )}
    </form>
  );
}

// A citation's exact span, fetched when opened (`resolveCitation`): the source's title and the
// cited passage, or why it is no longer available to the reader.

import type { CitationPart } from "@forge/client";
import { useEffect, useRef, useState } from "react";

import { describe, gql } from "../api";

/** A modal dialog showing `citation`'s span; `onClose` when it closes. */
export function CitationDialog({ citation, onClose }: { citation: CitationPart; onClose: () => void }) {
  const ref = useRef<HTMLDialogElement>(null);
  const [text, setText] = useState<{ title: string; text: string } | null>(null);
  const [error, setError] = useState<string | null>(null);
  useEffect(() => {
    ref.current?.showModal();
    let live = true;
    gql<{ resolveCitation: { title: string; text: string } }>(
      `query Cite($s: String!, $v: String!, $a: Int!, $b: Int!) {
        resolveCitation(sourceId: $s, version: $v, start: $a, end: $b) { title text }
      }`,
      { s: citation.source_id, v: citation.source_version, a: citation.span.start, b: citation.span.end },
    )
      .then((r) => live && setText(r.resolveCitation))
      .catch((e) => live && setError(describe(e)));
    return () => {
      live = false;
    };
  }, [citation]);
  return (
    <dialog ref={ref} onClose={onClose} aria-labelledby="citation-title" className="citation-dialog">
      <h2 id="citation-title">{text?.title ?? citation.source_id}</h2>
      <p className="muted">
        {citation.source_id}, bytes {citation.span.start}–{citation.span.end}
        {citation.line ? `, line ${citation.line}` : ""}
      </p>
      {text ? (
        <blockquote className="span">{text.text}</blockquote>
      ) : error ? (
        <p role="alert" className="error">
          The source is no longer available to you ({error})
        </p>
      ) : (
        <p className="muted">Loading the passage…</p>
      )}
      <form method="dialog">
        <button type="submit">Close</button>
      </form>
    </dialog>
  );
}

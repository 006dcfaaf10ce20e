// A line diff for showing a change a person must approve: which lines of the text now are
// kept, removed or added. Longest common subsequence over lines, with the common head and tail
// taken first; past `MAX_DIFF_CELLS` of table the middle is shown as removed then added (still
// exact, only less minimal) so a huge text never stalls the page.

/** One line of a diff. */
export interface DiffLine {
  /** `same` in both texts, `removed` from the text now, `added` by the change. */
  kind: "same" | "removed" | "added";
  text: string;
}

/** The largest LCS table (lines × lines) computed; beyond it the middle is replaced whole. */
export const MAX_DIFF_CELLS = 4_000_000;

/** The lines of `before` and `after` in order, each kept, removed or added. */
export function diffLines(before: string, after: string): DiffLine[] {
  const a = before === "" ? [] : before.split("\n");
  const b = after === "" ? [] : after.split("\n");
  let head = 0;
  while (head < a.length && head < b.length && a[head] === b[head]) head++;
  let tail = 0;
  while (
    tail < a.length - head &&
    tail < b.length - head &&
    a[a.length - 1 - tail] === b[b.length - 1 - tail]
  ) {
    tail++;
  }
  const same = (text: string): DiffLine => ({ kind: "same", text });
  const out: DiffLine[] = a.slice(0, head).map(same);
  const x = a.slice(head, a.length - tail);
  const y = b.slice(head, b.length - tail);
  if ((x.length + 1) * (y.length + 1) > MAX_DIFF_CELLS) {
    out.push(...x.map((text): DiffLine => ({ kind: "removed", text })));
    out.push(...y.map((text): DiffLine => ({ kind: "added", text })));
  } else {
    out.push(...middle(x, y));
  }
  out.push(...a.slice(a.length - tail).map(same));
  return out;
}

/** The LCS diff of `x` and `y`. */
function middle(x: string[], y: string[]): DiffLine[] {
  const width = y.length + 1;
  // lcs[i * width + j]: the LCS length of x[i..] and y[j..].
  const lcs = new Uint32Array((x.length + 1) * width);
  for (let i = x.length - 1; i >= 0; i--) {
    for (let j = y.length - 1; j >= 0; j--) {
      lcs[i * width + j] =
        x[i] === y[j]
          ? lcs[(i + 1) * width + j + 1] + 1
          : Math.max(lcs[(i + 1) * width + j], lcs[i * width + j + 1]);
    }
  }
  const out: DiffLine[] = [];
  let i = 0;
  let j = 0;
  while (i < x.length && j < y.length) {
    if (x[i] === y[j]) {
      out.push({ kind: "same", text: x[i] });
      i++;
      j++;
    } else if (lcs[(i + 1) * width + j] >= lcs[i * width + j + 1]) {
      out.push({ kind: "removed", text: x[i++] });
    } else {
      out.push({ kind: "added", text: y[j++] });
    }
  }
  while (i < x.length) out.push({ kind: "removed", text: x[i++] });
  while (j < y.length) out.push({ kind: "added", text: y[j++] });
  return out;
}

import { describe, expect, it } from "vitest";

import { type DiffLine, diffLines } from "./diff";

/** The text a diff says was there before, and the text it says is there after. */
function sides(diff: DiffLine[]): [string, string] {
  const before = diff.filter((l) => l.kind !== "added").map((l) => l.text);
  const after = diff.filter((l) => l.kind !== "removed").map((l) => l.text);
  return [before.join("\n"), after.join("\n")];
}

/** A deterministic generator, so a failure names a seed that reproduces it. */
function random(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (s * 1664525 + 1013904223) >>> 0;
    return s / 2 ** 32;
  };
}

/** The length of a longest common subsequence, by the textbook table. */
function lcsLength(a: string[], b: string[]): number {
  const t = a.map(() => b.map(() => 0));
  const at = (i: number, j: number) => (i < 0 || j < 0 ? 0 : t[i][j]);
  a.forEach((x, i) =>
    b.forEach((y, j) => {
      t[i][j] = x === y ? at(i - 1, j - 1) + 1 : Math.max(at(i - 1, j), at(i, j - 1));
    }),
  );
  return at(a.length - 1, b.length - 1);
}

const LINES = ["", "a", "Zoë", "多言語", "👩‍👩‍👧", "\u202Eevil", "  indented", "a"];

describe("diffLines", () => {
  it("shows a changed line as removed then added, the rest kept", () => {
    expect(diffLines("# Q3\nRevenue rose.\nThanks", "# Q3\nRevenue fell.\nThanks")).toEqual([
      { kind: "same", text: "# Q3" },
      { kind: "removed", text: "Revenue rose." },
      { kind: "added", text: "Revenue fell." },
      { kind: "same", text: "Thanks" },
    ]);
    expect(diffLines("", "first version")).toEqual([{ kind: "added", text: "first version" }]);
    expect(diffLines("gone", "")).toEqual([{ kind: "removed", text: "gone" }]);
  });

  it("rebuilds both texts exactly and keeps a longest common part, over arbitrary lines", () => {
    for (let seed = 1; seed <= 300; seed++) {
      const next = random(seed);
      const text = () =>
        Array.from({ length: Math.floor(next() * 8) }, () => LINES[Math.floor(next() * LINES.length)]).join(
          "\n",
        );
      const [before, after] = [text(), text()];
      const diff = diffLines(before, after);
      const split = (t: string) => (t === "" ? [] : t.split("\n"));
      expect(sides(diff), `seed ${seed}`).toEqual([split(before).join("\n"), split(after).join("\n")]);
      const same = diff.filter((l) => l.kind === "same").length;
      expect(same, `seed ${seed}`).toBe(lcsLength(split(before), split(after)));
    }
  });

  it("stays exact past the table cap", () => {
    const before = Array.from({ length: 2500 }, (_, i) => `line ${i}`).join("\n");
    const after = Array.from({ length: 2500 }, (_, i) => `line ${i % 2 ? i : -i}`).join("\n");
    expect(sides(diffLines(before, after))).toEqual([before, after]);
  });
});

// The phrases people read: cut at a character boundary whatever the text, money with its
// currency, a tool's input as a phrase.

import fc from "fast-check";
import { describe, expect, it } from "vitest";

import { cut, money, summarize } from "./text";

describe("cut", () => {
  it("keeps whole code points and the length asked for, over any Unicode", () => {
    fc.assert(
      fc.property(fc.string({ unit: "binary" }), fc.integer({ min: 1, max: 80 }), (text, max) => {
        const out = cut(text, max);
        const chars = Array.from(out);
        expect(chars.length).toBeLessThanOrEqual(Math.max(max, 1));
        // Never half of a surrogate pair: the result survives a round trip through UTF-8.
        expect(new TextDecoder().decode(new TextEncoder().encode(out))).toBe(out);
        if (Array.from(text).length <= max) expect(out).toBe(text);
        else expect(text.startsWith(out.slice(0, -1))).toBe(true);
      }),
      { numRuns: 500 },
    );
  });

  it("cuts astral characters whole", () => {
    expect(cut("😀😀😀", 2)).toBe("😀…");
  });
});

describe("money", () => {
  it("names the currency and shows small costs", () => {
    expect(money(4200, "USD")).toMatch(/\$0\.0042/);
    expect(money(1_500_000, "EUR")).toMatch(/1[.,]50/);
    expect(money(1_500_000, "EUR")).toMatch(/€/);
    expect(money(0, "USD")).toMatch(/\$0\.00/);
  });

  it("shows an unknown currency code as the code", () => {
    expect(money(2_000_000, "not a code")).toBe("2.00 not a code");
  });
});

describe("summarize", () => {
  it("names a flat object's first scalar fields", () => {
    expect(summarize({ invoice_id: "INV-203", amount: 500, nested: { a: 1 } })).toBe("invoice id INV-203, amount 500");
    expect(summarize([1, 2])).toBe("");
    expect(summarize(null)).toBe("");
  });
});

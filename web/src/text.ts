// Values shown to people: a tool's input as a short phrase rather than JSON, money with its
// currency, text cut at a character boundary.

/** Text at most `max` characters long (whole code points, never half of a pair), with `…`. */
export function cut(text: string, max: number): string {
  const chars = Array.from(text);
  return chars.length <= max ? text : `${chars.slice(0, Math.max(0, max - 1)).join("")}…`;
}

/** A flat object's first few scalar fields as `name value, …` (`invoice_id INV-203, amount 500`). */
export function summarize(input: unknown, fields = 3): string {
  if (input === null || typeof input !== "object" || Array.isArray(input)) return "";
  const parts = Object.entries(input as Record<string, unknown>)
    .filter(([, v]) => ["string", "number", "boolean"].includes(typeof v))
    .slice(0, fields)
    .map(([k, v]) => `${k.replace(/_/g, " ")} ${cut(String(v), 40)}`);
  return parts.join(", ");
}

/** Micro-units of `currency` as money (`$0.0042`), with enough digits to show a small cost. */
export function money(micros: number, currency: string): string {
  const amount = micros / 1_000_000;
  const digits = amount !== 0 && Math.abs(amount) < 0.01 ? 6 : 2;
  try {
    return new Intl.NumberFormat(undefined, {
      style: "currency",
      currency,
      minimumFractionDigits: 2,
      maximumFractionDigits: digits,
    }).format(amount);
  } catch {
    return `${amount.toFixed(digits)} ${currency}`;
  }
}

import { defineConfig } from "vitest/config";

// Unit tests (the reducer, its property test, the backoff) and the live tests against a real
// `forge serve` (one file at a time: they start servers).
export default defineConfig({
  test: {
    include: ["src/**/*.test.ts", "tests/**/*.test.ts"],
    environment: "node",
    fileParallelism: false,
    testTimeout: 120_000,
    hookTimeout: 60_000,
    benchmark: { include: ["src/**/*.bench.ts"] },
  },
});

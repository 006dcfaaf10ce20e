import { defineConfig } from "vitest/config";

// Browser tests: a real `forge serve`, Debian's Chromium; one file at a time (they start
// servers), generous timeouts (runs stream for seconds on purpose).
export default defineConfig({
  test: {
    include: ["tests/e2e/**/*.test.ts"],
    environment: "node",
    fileParallelism: false,
    testTimeout: 120_000,
    hookTimeout: 60_000,
  },
});

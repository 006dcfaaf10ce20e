import { defineConfig } from "vitest/config";

// Measurements, not tests (nothing here runs in CI): `npx vitest run --config
// vitest.bench.config.ts`, with FORGE_BIN as for the browser tests.
export default defineConfig({
  test: {
    include: ["bench/**/*.ts"],
    environment: "node",
    fileParallelism: false,
    testTimeout: 900_000,
    hookTimeout: 900_000,
  },
});

import { defineConfig } from "vite";
import react from "@vitejs/plugin-react";

// GraphiQL (`forge serve --graphiql`), bundled beside the client under fixed names so that it
// works with no network: built after the client's bundle (which empties the directory), into the
// same one, and compiled into the binary with it.
export default defineConfig({
  plugins: [react()],
  build: {
    outDir: "../crates/forge-server/ui",
    emptyOutDir: false,
    assetsDir: "assets",
    sourcemap: false,
    modulePreload: false,
    chunkSizeWarningLimit: 2000,
    rollupOptions: {
      input: "graphiql.html",
      // GraphiQL's modules open with "use client" (meaningless in a plain bundle).
      onwarn: (warning, warn) => {
        if (warning.code !== "MODULE_LEVEL_DIRECTIVE") warn(warning);
      },
      output: {
        entryFileNames: "assets/graphiql.js",
        chunkFileNames: "assets/graphiql.js",
        assetFileNames: (info) =>
          info.names.some((n) => n.endsWith(".css")) ? "assets/graphiql.css" : "assets/[name][extname]",
        codeSplitting: false,
      },
    },
  },
});

import { defineConfig } from "vite";
import react from "@vitejs/plugin-react";

// The production bundle goes where forge-server compiles it in from, under fixed names (the
// binary embeds exactly these files; a CI check rebuilds and compares).
export default defineConfig({
  plugins: [react()],
  build: {
    outDir: "../crates/forge-server/ui",
    emptyOutDir: true,
    assetsDir: "assets",
    sourcemap: false,
    modulePreload: false,
    rollupOptions: {
      output: {
        entryFileNames: "assets/app.js",
        chunkFileNames: "assets/app.js",
        assetFileNames: (info) =>
          info.names.some((n) => n.endsWith(".css")) ? "assets/app.css" : "assets/[name][extname]",
        codeSplitting: false,
      },
    },
  },
  server: {
    proxy: {
      "/graphql": { target: "http://127.0.0.1:8080", ws: true },
      "/auth": "http://127.0.0.1:8080",
      "/files": "http://127.0.0.1:8080",
    },
  },
});

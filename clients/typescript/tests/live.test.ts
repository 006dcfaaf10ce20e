// The package against a real `forge serve` (the binary, on SQLite): a thread followed while its
// run streams, the connection cut mid-stream and restored through a TCP proxy, and the view at the
// end equal to the committed log — every word once, nothing missing, no gap.

import { type ChildProcess, spawn, spawnSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import net from "node:net";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

import { afterAll, beforeAll, describe, expect, it } from "vitest";
import WebSocket from "ws";

import {
  type Connection,
  type LiveStatus,
  type ThreadState,
  assistantText,
  createForgeClient,
  followRun,
  liveThread,
} from "../src/index";

const here = dirname(fileURLToPath(import.meta.url));
const repo = resolve(here, "../../..");
const SECRET = "client-secret-client-secret-0123456789abcdef";

/** The `forge` binary: `FORGE_BIN`, or the workspace's debug build. */
function forgeBin(): string {
  const bin = resolve(
    process.env.FORGE_BIN ?? join(process.env.CARGO_TARGET_DIR ?? join(repo, "target"), "debug", "forge"),
  );
  if (spawnSync(bin, ["--version"]).status !== 0) {
    throw new Error(`the forge binary is not at ${bin}: build it with \`cargo build -p forge-cli\` (or set FORGE_BIN)`);
  }
  return bin;
}

async function freePort(): Promise<number> {
  return new Promise((ok, fail) => {
    const s = net.createServer();
    s.listen(0, "127.0.0.1", () => {
      const addr = s.address();
      s.close(() => (typeof addr === "object" && addr ? ok(addr.port) : fail(new Error("no port"))));
    });
  });
}

/** A TCP proxy in front of `target` whose connections `cut()` resets, as a dropped network does. */
async function proxy(target: number): Promise<{ port: number; cut(): number; close(): void }> {
  const sockets = new Set<net.Socket>();
  const server = net.createServer((client) => {
    const upstream = net.connect(target, "127.0.0.1");
    sockets.add(client).add(upstream);
    client.pipe(upstream);
    upstream.pipe(client);
    const drop = () => {
      client.destroy();
      upstream.destroy();
      sockets.delete(client);
      sockets.delete(upstream);
    };
    for (const s of [client, upstream]) {
      s.on("error", drop);
      s.on("close", drop);
    }
  });
  await new Promise<void>((ok) => server.listen(0, "127.0.0.1", ok));
  const addr = server.address();
  return {
    port: typeof addr === "object" && addr ? addr.port : 0,
    cut() {
      const n = sockets.size;
      for (const s of sockets) s.resetAndDestroy();
      return n;
    },
    close: () => server.close(),
  };
}

/** Resolves when `ready` holds, checked on every change the subscription reports. */
function when<T>(subscribe: (check: () => void) => void, ready: () => T | undefined): Promise<T> {
  return new Promise((ok) => {
    const check = () => {
      const v = ready();
      if (v !== undefined) ok(v);
    };
    subscribe(check);
    check();
  });
}

describe("live subscriptions against forge serve", () => {
  let dir: string;
  let server: ChildProcess;
  let log = "";
  let port: number;
  let token: string;

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), "forge-client-"));
    port = await freePort();
    server = spawn(
      forgeBin(),
      [
        "serve", "--store", `sqlite://${join(dir, "forge.db")}`, "--listen", `127.0.0.1:${port}`,
        "--agent", join(here, "agents/stream.toml"), "--dev-sign-in",
      ],
      { cwd: dir, env: { ...process.env, FORGE_JWT_SECRET: SECRET }, stdio: ["ignore", "pipe", "pipe"] },
    );
    server.stdout?.on("data", (d) => (log += d));
    server.stderr?.on("data", (d) => (log += d));
    // Listening: the server says so on stderr once it accepts connections.
    await new Promise<void>((ok, fail) => {
      server.stderr?.on("data", () => log.includes("listening on") && ok());
      server.once("exit", () => fail(new Error(`forge serve exited:\n${log}`)));
    });
    const r = await fetch(`http://127.0.0.1:${port}/auth/dev`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ tenant: "acme", principal: "alice", roles: [] }),
    });
    token = ((await r.json()) as { token: string }).token;
  });

  afterAll(() => {
    server?.kill("SIGKILL");
    rmSync(dir, { recursive: true, force: true });
  });

  it("keeps a thread's view through a cut connection and ends on the committed log", async () => {
    const front = await proxy(port);
    const client = createForgeClient({ url: `http://127.0.0.1:${front.port}/graphql`, token: () => token });
    let sockets = 0;
    const conn: Connection = {
      url: `ws://127.0.0.1:${front.port}/graphql`,
      token: () => token,
      webSocketImpl: WebSocket,
      onClient: () => sockets++,
    };
    const thread = await client.createThread("live test");
    const listeners = new Set<() => void>();
    const statuses: LiveStatus[] = [];
    const live = liveThread(conn, thread.id, {
      changed: () => listeners.forEach((l) => l()),
      status: (s) => {
        statuses.push(s);
        listeners.forEach((l) => l());
      },
    });
    const changes = (check: () => void) => listeners.add(check);
    const run = await client.startRun(thread.id, "stream", "count");
    const text = (s: ThreadState) => {
      const r = s.runs[run.id];
      return r ? assistantText(r.view) : "";
    };

    // Mid-stream, provisional text shown: cut every connection.
    await when(changes, () => (text(live.state()).includes("four") ? true : undefined));
    expect(front.cut()).toBeGreaterThan(0);
    await when(changes, () => (statuses.includes("reconnecting") ? true : undefined));
    const ended = await when(changes, () => {
      const r = live.state().runs[run.id];
      // Completed in the committed log, not only in the step in flight.
      return r && r.base.status === "completed" ? r : undefined;
    });
    live.stop();

    expect(sockets).toBeGreaterThanOrEqual(2);
    expect(ended.gap).toBeFalsy();
    const words = assistantText(ended.view).trim().split(/\s+/);
    expect(new Set(words).size).toBe(words.length);
    expect(assistantText(ended.view)).toContain("twelve");
    expect(assistantText(ended.view)).toMatch(/done at 21\.$/);
    // Exactly what the server committed, through its last event.
    const stored = await client.gql<{ runEvents: { seq: number }[] }>(
      "query($id: ID!) { runEvents(runId: $id, limit: 1000) { seq } }",
      { id: run.id },
    );
    expect(ended.committedSeq).toBe(stored.runEvents.at(-1)?.seq);
    expect(ended.provisional).toEqual([]);
    front.close();
  });

  it("follows one run to its end and stops by itself", async () => {
    const client = createForgeClient({ url: `http://127.0.0.1:${port}/graphql`, token: () => token });
    const thread = await client.createThread();
    const run = await client.startRun(thread.id, "stream", "hello");
    const items: string[] = [];
    await new Promise<void>((ok) => {
      followRun(
        { url: `ws://127.0.0.1:${port}/graphql`, token: () => token, webSocketImpl: WebSocket },
        run.id,
        {
          resubscribed: () => {},
          item: (item) => items.push(item.kind),
          cursors: () => [],
          gap: () => false,
          status: () => {},
          signInRequired: () => {},
          ended: ok,
        },
      );
    });
    expect(items.length).toBeGreaterThan(0);
  });
});

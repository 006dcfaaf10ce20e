// The browser tests' harness: a real `forge serve` (the binary, on SQLite), a TCP proxy in front
// of it whose connections a test can cut, Debian's Chromium driven by playwright-core, and
// axe-core run inside the page.

import { type ChildProcess, spawn, spawnSync } from "node:child_process";
import { createHmac } from "node:crypto";
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import net from "node:net";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { createRequire } from "node:module";
import { fileURLToPath } from "node:url";

import { type Browser, type Page, chromium } from "playwright-core";

const here = dirname(fileURLToPath(import.meta.url));
export const repo = resolve(here, "../../..");
const require = createRequire(import.meta.url);

/** The `forge` binary: `FORGE_BIN`, or the workspace's debug build. */
export function forgeBin(): string {
  // Resolved now: the processes run in other directories.
  const bin = resolve(
    process.env.FORGE_BIN ?? join(process.env.CARGO_TARGET_DIR ?? join(repo, "target"), "debug", "forge"),
  );
  const probe = spawnSync(bin, ["--version"]);
  if (probe.status !== 0) {
    throw new Error(
      `the forge binary is not at ${bin}: build it with \`cargo build -p forge-cli\` (or set FORGE_BIN)`,
    );
  }
  return bin;
}

export const SECRET = "e2e-secret-e2e-secret-e2e-secret-0123456789";

export async function freePort(): Promise<number> {
  return new Promise((ok, fail) => {
    const s = net.createServer();
    s.listen(0, "127.0.0.1", () => {
      const addr = s.address();
      s.close(() => (typeof addr === "object" && addr ? ok(addr.port) : fail(new Error("no port"))));
    });
  });
}

/** A running `forge serve` on a SQLite file of its own. */
/** How a test's server runs. */
export interface ServeOptions {
  /** No in-process worker: runs stay queued until `worker()` starts one. */
  noWorker?: boolean;
  /** Serve GraphiQL on `GET /graphql`. */
  graphiql?: boolean;
  /** More arguments for `forge serve`, written for the server's directory before it starts. */
  extra?: (dir: string) => string[];
  /** More environment variables for `forge serve`. */
  env?: Record<string, string>;
}

export class Forge {
  readonly dir: string;
  readonly port: number;
  private child: ChildProcess | null = null;
  private workers: ChildProcess[] = [];
  private log = "";
  private readonly options: ServeOptions;

  private constructor(dir: string, port: number, options: ServeOptions) {
    this.dir = dir;
    this.port = port;
    this.options = options;
  }

  get url(): string {
    return `http://127.0.0.1:${this.port}`;
  }

  get store(): string {
    return `sqlite://${join(this.dir, "forge.db")}`;
  }

  /** Starts a server with the example and test agents, the example policies, dev sign-in. */
  static async start(options: ServeOptions = {}): Promise<Forge> {
    const f = new Forge(mkdtempSync(join(tmpdir(), "forge-e2e-")), await freePort(), options);
    f.ingest();
    await f.boot();
    return f;
  }

  private ingest(): void {
    const out = spawnSync(
      forgeBin(),
      [
        "rag", "ingest", "--store", this.store, "--tenant", "acme", "--label", "public",
        join(repo, "examples/sources/handbook.md"),
      ],
      { cwd: join(repo, "examples/sources") },
    );
    if (out.status !== 0) throw new Error(`ingest failed: ${out.error ?? out.stderr}`);
  }

  /** Starts (or starts again) the process. */
  /** The agents, policies, files and a price table for the scripted models (so runs cost something). */
  private agents(): string[] {
    const prices = join(this.dir, "prices.toml");
    writeFileSync(
      prices,
      ["stream", "calculator", "payments"]
        .map((m) => `[models."scripted:${m}.script.toml"]\ninput = 3000000\noutput = 15000000\n`)
        .join("\n")
        .replace(/^/, 'currency = "USD"\n'),
    );
    return [
      "--prices", prices,
      "--agent", join(repo, "examples/agents/payments.toml"),
      "--agent", join(repo, "examples/agents/calculator.toml"),
      "--agent", join(here, "agents/stream.toml"),
      "--policies", join(repo, "examples/policies"),
      "--files-dir", join(this.dir, "files"),
    ];
  }

  async boot(): Promise<void> {
    const args = [
      "serve", "--store", this.store, "--listen", `127.0.0.1:${this.port}`, ...this.agents(), "--dev-sign-in",
      ...(this.options.noWorker ? ["--no-worker"] : []),
      ...(this.options.graphiql ? ["--graphiql"] : []),
      ...(this.options.extra?.(this.dir) ?? []),
    ];
    this.child = spawn(forgeBin(), args, {
      cwd: this.dir,
      env: { ...process.env, FORGE_JWT_SECRET: SECRET, ...this.options.env },
      stdio: ["ignore", "pipe", "pipe"],
    });
    this.child.stdout?.on("data", (d) => (this.log += d));
    this.child.stderr?.on("data", (d) => (this.log += d));
    const deadline = Date.now() + 30_000;
    while (Date.now() < deadline) {
      if (this.child.exitCode !== null) throw new Error(`forge serve exited:\n${this.log}`);
      try {
        const r = await fetch(`${this.url}/healthz`);
        if (r.ok) return;
      } catch {
        // not yet
      }
      await new Promise((r) => setTimeout(r, 100));
    }
    throw new Error(`forge serve did not answer:\n${this.log}`);
  }

  /**
   * Starts a `forge worker` process on the same store (for a server started with `noWorker`),
   * with `extra` arguments (`--lease-ttl-ms 1500`, say); `kill -9` it with `crash`.
   */
  worker(extra: string[] = []): ChildProcess {
    const child = spawn(forgeBin(), ["worker", "--store", this.store, ...this.agents(), ...extra], {
      cwd: this.dir,
      env: { ...process.env, FORGE_JWT_SECRET: SECRET },
      stdio: ["ignore", "pipe", "pipe"],
    });
    child.stdout?.on("data", (d) => (this.log += d));
    child.stderr?.on("data", (d) => (this.log += d));
    this.workers.push(child);
    return child;
  }

  /** Kills a process outright (no drain), as a crash would. */
  static async crash(child: ChildProcess): Promise<void> {
    if (child.exitCode !== null || child.signalCode !== null) return;
    const exited = new Promise((r) => child.once("exit", r));
    child.kill("SIGKILL");
    await exited;
  }

  /** `forge ARGS…` on this server's store, to its end: its standard output. */
  cli(args: string[]): string {
    const out = spawnSync(forgeBin(), [...args, "--store", this.store], { cwd: this.dir, encoding: "utf8" });
    if (out.status !== 0) throw new Error(`forge ${args.join(" ")} failed: ${out.stderr}`);
    return out.stdout;
  }

  /** Kills the process outright (no drain), as a crash would. */
  async kill(): Promise<void> {
    const child = this.child;
    if (!child || child.exitCode !== null) return;
    const exited = new Promise((r) => child.once("exit", r));
    child.kill("SIGKILL");
    await exited;
  }

  /** Stops the process (and the worker, if one was started). */
  async stop(): Promise<void> {
    await this.kill();
    await Promise.all(this.workers.map((w) => Forge.crash(w)));
  }

  output(): string {
    return this.log;
  }

  /** A development token. */
  async token(tenant: string, principal: string, roles: string[]): Promise<string> {
    const r = await fetch(`${this.url}/auth/dev`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ tenant, principal, roles }),
    });
    const body = (await r.json()) as { token: string };
    return body.token;
  }

  /** A GraphQL request as `token`. */
  async gql<T>(token: string, query: string, variables: Record<string, unknown> = {}): Promise<T> {
    const r = await fetch(`${this.url}/graphql`, {
      method: "POST",
      headers: { "content-type": "application/json", authorization: `Bearer ${token}` },
      body: JSON.stringify({ query, variables }),
    });
    const body = (await r.json()) as { data?: T; errors?: { message: string }[] };
    if (body.errors?.length) throw new Error(JSON.stringify(body.errors));
    return body.data as T;
  }
}

/** A TCP proxy in front of `port`: the page talks to the proxy; `cut()` kills every connection. */
export class Proxy {
  private server: net.Server;
  private sockets = new Set<net.Socket>();
  port = 0;

  private constructor(target: number) {
    this.server = net.createServer((client) => {
      const upstream = net.connect(target, "127.0.0.1");
      this.sockets.add(client);
      this.sockets.add(upstream);
      client.pipe(upstream);
      upstream.pipe(client);
      const drop = () => {
        client.destroy();
        upstream.destroy();
        this.sockets.delete(client);
        this.sockets.delete(upstream);
      };
      client.on("error", drop);
      upstream.on("error", drop);
      client.on("close", drop);
      upstream.on("close", drop);
    });
  }

  static async start(target: number): Promise<Proxy> {
    const p = new Proxy(target);
    await new Promise<void>((ok) => p.server.listen(0, "127.0.0.1", ok));
    const addr = p.server.address();
    p.port = typeof addr === "object" && addr ? addr.port : 0;
    return p;
  }

  get url(): string {
    return `http://127.0.0.1:${this.port}`;
  }

  /** Every open connection, reset: what a dropped network does to a WebSocket. */
  cut(): number {
    const n = this.sockets.size;
    for (const s of this.sockets) s.resetAndDestroy();
    this.sockets.clear();
    return n;
  }

  async stop(): Promise<void> {
    this.cut();
    await new Promise((r) => this.server.close(r));
  }
}

/** Debian's Chromium, headless, as the machine notes say to start it. */
export async function browser(): Promise<Browser> {
  return chromium.launch({
    executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium",
    headless: true,
    args: [
      "--no-sandbox",
      "--disable-gpu",
      "--disable-quic",
      "--no-first-run",
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-sync",
    ],
  });
}

/**
 * A page of `base` signed in with `token`, in a browser context of its own (the session is kept
 * in the origin's storage, shared by the context's tabs, as the client keeps it).
 */
export async function signedIn(b: Browser, base: string, token: string, path = "/"): Promise<Page> {
  const context = await b.newContext();
  const page = await context.newPage();
  if (token) {
    // Once per context: a later sign-out or expiry in the page is not undone by a reload.
    await page.goto(`${base}/favicon.svg`);
    await page.evaluate((t) => localStorage.setItem("forge.token", t), token);
  }
  await page.goto(base + path);
  return page;
}

const AXE = readFileSync(require.resolve("axe-core/axe.min.js"), "utf8");

/**
 * axe-core's violations on the page as it stands: WCAG 2.0 and 2.1 A and AA rules, and axe's
 * best practices (heading order, landmarks…) unless `wcagOnly`.
 */
export async function violations(page: Page, wcagOnly = false): Promise<string[]> {
  // Evaluated through the debugging protocol, not as a page script: the page's CSP (its own
  // scripts only) stays in force and is not weakened for the check.
  await page.evaluate(AXE);
  return page.evaluate(async (only) => {
    const axe = (window as unknown as { axe: { run(o: unknown): Promise<{ violations: { id: string; help: string; nodes: { target: string[] }[] }[] }> } }).axe;
    const tags = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa", ...(only ? [] : ["best-practice"])];
    const r = await axe.run({ runOnly: { type: "tag", values: tags } });
    return r.violations.map((v) => `${v.id}: ${v.help} (${v.nodes.map((n) => n.target.join(" ")).join("; ")})`);
  }, wcagOnly);
}

/** An HS256 token of the test secret living `ttlSecs` seconds. */
export function shortToken(tenant: string, principal: string, roles: string[], ttlSecs: number): string {
  const b64 = (v: object) => Buffer.from(JSON.stringify(v)).toString("base64url");
  const now = Math.floor(Date.now() / 1000);
  const head = b64({ alg: "HS256", typ: "JWT" });
  const body = b64({ sub: principal, tenant_id: tenant, roles, iat: now, exp: now + ttlSecs });
  const mac = createHmac("sha256", SECRET).update(`${head}.${body}`).digest("base64url");
  return `${head}.${body}.${mac}`;
}

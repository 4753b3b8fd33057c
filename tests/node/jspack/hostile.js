// A js pack's code that tries what code in the JS runtime may not do; each export returns what it got.
import { helper } from "./lib/helper.js";

async function attempt(fn) {
  try {
    return { ok: await fn() };
  } catch (e) {
    return { error: String(e && (e.code || e.name)), message: String(e && e.message).slice(0, 200) };
  }
}

export async function echo(input, context) {
  return { input, connections: context.connections, deadlineInFuture: context.deadline > Date.now(), helper: helper() };
}

export async function env() {
  return { env: { ...process.env } };
}

export async function files(input) {
  const fs = await import("node:fs");
  return {
    passwd: await attempt(() => fs.readFileSync("/etc/passwd", "utf8").slice(0, 10)),
    input: await attempt(() => fs.readdirSync("/in")),
    write: await attempt(() => fs.writeFileSync("/work/x", "x")),
    own: await attempt(() => fs.readFileSync("/tool/js/lib/helper.js", "utf8").length > 0),
  };
}

export async function internals() {
  return {
    binding: await attempt(() => process.binding("spawn_sync") && "got it"),
    dlopen: await attempt(() => process.dlopen({ exports: {} }, "/usr/lib/x86_64-linux-gnu/libc.so.6") || "loaded"),
    worker: await attempt(async () => new (await import("node:worker_threads")).Worker("1", { eval: true }) && "started"),
    evalString: await attempt(() => eval("1 + 1")),
    fnString: await attempt(() => new Function("return 2")()),
  };
}

export async function spawn() {
  const cp = await import("node:child_process");
  return { exec: await attempt(() => cp.execSync("id").toString()), spawn: await attempt(() => cp.spawnSync("/bin/sh").status) };
}

export async function socket(input) {
  const net = await import("node:net");
  const tryConnect = (host, port) =>
    new Promise((resolve) => {
      const s = net.connect({ host, port, timeout: 2000 });
      s.on("connect", () => { s.destroy(); resolve("connected"); });
      s.on("error", (e) => resolve(e.code));
      s.on("timeout", () => { s.destroy(); resolve("timeout"); });
    });
  return { loopback: await tryConnect("127.0.0.1", input.port), metadata: await tryConnect("169.254.169.254", 80) };
}

export async function fetchUrl(input) {
  const response = await fetch(input.url, { headers: input.headers || {}, method: input.method || "GET", body: input.body });
  return { status: response.status, url: response.url, body: await response.text(), link: response.headers.get("link") };
}

export async function spin() {
  for (;;) {}
}

export async function hog() {
  const kept = [];
  for (;;) kept.push(new Array(1 << 20).fill(kept.length));
}

export async function hogBuffers() {
  const kept = [];
  for (;;) kept.push(Buffer.alloc(64 << 20, 1));
}

export async function shout() {
  const line = "x".repeat(1 << 16);
  for (let i = 0; i < 64; i++) console.log(line);
  return { said: 64 };
}

export async function fail(input) {
  throw Object.assign(new Error(input.message), { code: input.code });
}

export async function notAnObject() {
  return [1, 2];
}

export async function lingers() {
  setInterval(() => {}, 1000);
  return { done: true };
}

export async function rawSocket(input) {
  const net = await import("node:net");
  return await new Promise((resolve) => {
    const s = net.connect("/in/egress.sock");
    const chunks = [];
    s.on("connect", () => s.end(JSON.stringify(input.request) + "\n"));
    s.on("data", (c) => chunks.push(c));
    s.on("end", () => resolve(JSON.parse(Buffer.concat(chunks).toString())));
    s.on("error", (e) => resolve({ error: e.code }));
  });
}

import assert from "node:assert/strict";
import { createServer } from "node:net";
import { test } from "node:test";
import { inspect } from "node:util";

import {
  ActionFailed,
  APIError,
  B3OS,
  B3OSError,
  ConfigError,
  Conflict,
  ConnectionFailed,
  Forbidden,
  IdempotencyKeyReused,
  InvalidRequest,
  NotFound,
  PayloadTooLarge,
  RateLimited,
  ServerError,
  TimedOut,
  Unauthorized,
  Unavailable,
} from "@b3os/sdk";

import { error, serve } from "./server.js";

const CASES: [number, string, new (...args: never[]) => APIError][] = [
  [400, "invalid_request", InvalidRequest],
  [401, "unauthorized", Unauthorized],
  [403, "forbidden", Forbidden],
  [404, "not_found", NotFound],
  [409, "conflict", Conflict],
  [413, "payload_too_large", PayloadTooLarge],
  [422, "idempotency_key_reused", IdempotencyKeyReused],
  [429, "concurrency_limited", RateLimited],
  [500, "internal", ServerError],
  [502, "tool_failed", ActionFailed],
  [503, "pack_unavailable", Unavailable],
  [504, "action_timed_out", TimedOut],
];

test("each error answer is its class, carrying the api's code, reason, sentence and body", async () => {
  const api = await serve((_, n) => {
    const [status, code] = CASES[n]!;
    return error(status, code, `sentence ${n}`, { reason: "why", field: "input.name" });
  });
  try {
    const b3os = new B3OS({ apiUrl: api.url, apiKey: "b3_test", maxRetries: 0 });
    for (const [n, [status, code, Class]] of CASES.entries()) {
      const thrown = await b3os.actions.getPack("io.b3os", "open-meteo").catch((e: unknown) => e);
      assert.ok(thrown instanceof Class, `${status} ${code}: ${String(thrown)}`);
      assert.ok(thrown instanceof APIError && thrown instanceof B3OSError && thrown instanceof Error);
      assert.equal(thrown.name, Class.name);
      assert.deepEqual(
        [thrown.status, thrown.code, thrown.reason, thrown.message],
        [status, code, "why", `sentence ${n}`],
      );
      assert.deepEqual(thrown.body, { code, message: `sentence ${n}`, reason: "why", field: "input.name" });
      assert.equal(String(thrown), `sentence ${n} (${status} ${code})`);
      assert.equal(thrown.retryAfter, null);
    }
  } finally {
    await api.close();
  }
});

test("an answer that is not the api's error shape still throws by status, with a sentence", async () => {
  const api = await serve([
    { status: 502, text: "<html>bad gateway</html>" },
    { status: 422, json: { detail: "x" } },
    { status: 429, json: { error: { code: "rate_limited", message: "later", retry_after: 3 } } },
  ]);
  try {
    const b3os = new B3OS({ apiUrl: api.url, apiKey: "b3_test", maxRetries: 0 });
    const gateway = await b3os.usage().catch((e: unknown) => e);
    assert.ok(gateway instanceof ActionFailed);
    assert.deepEqual([gateway.code, gateway.message, gateway.body], [null, "The api answered 502 Bad Gateway.", {}]);
    const other = await b3os.usage().catch((e: unknown) => e);
    assert.ok(other instanceof APIError && !(other instanceof IdempotencyKeyReused) && other.status === 422);
    const later = await b3os.usage().catch((e: unknown) => e);
    assert.ok(later instanceof RateLimited && later.retryAfter === 3); // the body's retry_after without the header
  } finally {
    await api.close();
  }
});

test("a call whose connection broke is a ConnectionFailed with the key to send it again safely", async () => {
  const api = await serve((_, n) =>
    n === 0
      ? "drop"
      : { status: 200, json: { call_id: "tcall_1", ref: "x", tier: "vm", output: {}, cost: {}, timings: {} } },
  );
  try {
    const b3os = new B3OS({ apiUrl: api.url, apiKey: "b3_test" });
    const failed = await b3os.actions.call("com.example.tools/echo/noop@1").catch((e: unknown) => e);
    assert.ok(failed instanceof ConnectionFailed && failed instanceof B3OSError);
    const sent = api.seen[0]?.headers["idempotency-key"];
    assert.match(String(sent), /^b3os-sdk-/);
    assert.equal(failed.idempotencyKey, sent);
    assert.match(failed.message, new RegExp(`^Cannot reach the api at ${api.url} \\(.+\\)$`));
    assert.equal(failed.timedOut, false);
    await b3os.actions.call("com.example.tools/echo/noop@1", {}, { idempotencyKey: failed.idempotencyKey! });
    assert.equal(api.seen[1]?.headers["idempotency-key"], sent);
  } finally {
    await api.close();
  }
});

test("an api that does not answer within timeoutMs is a ConnectionFailed that says so", async () => {
  const api = await serve(["hang"]);
  try {
    const b3os = new B3OS({ apiUrl: api.url, apiKey: "b3_test", timeoutMs: 200 });
    const failed = await b3os.routines.run("hello").catch((e: unknown) => e);
    assert.ok(failed instanceof ConnectionFailed && failed.timedOut);
    assert.equal(failed.message, `The api at ${api.url} did not answer in time (no answer in 200 ms)`);
    assert.equal(failed.idempotencyKey, api.seen[0]?.headers["idempotency-key"]);
  } finally {
    await api.close();
  }
});

test("an api nobody listens at is a ConnectionFailed naming the refusal", async () => {
  const probe = createServer();
  await new Promise<void>((resolve) => probe.listen(0, "127.0.0.1", resolve));
  const { port } = probe.address() as { port: number };
  await new Promise((resolve) => probe.close(resolve));
  const closed = `http://127.0.0.1:${port}`;
  const failed = await new B3OS({ apiUrl: closed, apiKey: "b3_k" }).usage().catch((e: unknown) => e);
  assert.ok(failed instanceof ConnectionFailed);
  assert.equal(failed.message, `Cannot reach the api at ${closed} (ECONNREFUSED)`);
  assert.equal(failed.idempotencyKey, null); // a read has no key
});

test("no settings are errors that say so; options override the environment; the key is never shown", async () => {
  const saved = { url: process.env["B3OS_API_URL"], key: process.env["B3OS_API_KEY"] };
  try {
    delete process.env["B3OS_API_URL"];
    delete process.env["B3OS_API_KEY"];
    assert.throws(() => new B3OS(), { name: "ConfigError", message: /^No api URL: pass apiUrl or set B3OS_API_URL/ });
    process.env["B3OS_API_URL"] = "ftp://example";
    assert.throws(() => new B3OS(), ConfigError);
    const api = await serve([{ status: 200, json: { month: "2026-12" } }]);
    try {
      process.env["B3OS_API_URL"] = `${api.url}/`;
      assert.throws(() => new B3OS(), { message: "No API key: pass apiKey or set B3OS_API_KEY." });
      process.env["B3OS_API_KEY"] = "b3_from_env";
      const fromEnv = new B3OS();
      assert.equal(fromEnv.apiUrl, api.url);
      await fromEnv.usage("2026-12");
      await new B3OS({ apiKey: "b3_given" }).usage();
      assert.deepEqual(
        api.seen.map((s) => [s.url, s.headers["authorization"]]),
        [
          ["/v1/usage?month=2026-12", "Bearer b3_from_env"],
          ["/v1/usage", "Bearer b3_given"],
        ],
      );
      assert.match(String(api.seen[0]?.headers["user-agent"]), /^b3os-typescript\/0\.1\.0$/);
      assert.ok(!inspect(fromEnv, { depth: 5, showHidden: true }).includes("b3_from_env"));
      assert.throws(() => new B3OS({ maxRetries: -1 }), {
        message: "maxRetries must be a whole number, 0 or more, not -1.",
      });
    } finally {
      await api.close();
    }
  } finally {
    for (const [name, value] of [
      ["B3OS_API_URL", saved.url],
      ["B3OS_API_KEY", saved.key],
    ] as const) {
      if (value === undefined) delete process.env[name];
      else process.env[name] = value;
    }
  }
});

import assert from "node:assert/strict";
import { test } from "node:test";

import { B3OS, Conflict, RateLimited, type Retry, Unavailable } from "@b3os/sdk";

import { error, serve } from "./server.js";

const ECHO = "com.example.tools/echo/echo@1";
const OK = {
  status: 200,
  json: { call_id: "tcall_1", ref: `${ECHO}.0.0`, tier: "vm", output: { text: "hi" }, cost: {}, timings: {} },
};

/** A client of `url` whose waits are recorded, not slept. */
function recording(url: string, options: { maxRetries?: number; maxRetryWaitS?: number } = {}) {
  const waits: number[] = [];
  const retries: Retry[] = [];
  const b3os = new B3OS({
    apiUrl: url,
    apiKey: "b3_test",
    sleep: async (seconds) => waits.push(seconds),
    onRetry: (retry) => retries.push(retry),
    ...options,
  });
  return { b3os, waits, retries };
}

test("a 429 is sent again after exactly its Retry-After with the same Idempotency-Key", async () => {
  const api = await serve([
    error(429, "rate_limited", "slow down", { reason: "upstream" }, { "Retry-After": "1.5" }),
    OK,
  ]);
  try {
    const { b3os, waits, retries } = recording(api.url);
    const answer = await b3os.actions.call(ECHO, { text: "hi" });
    assert.deepEqual(answer.output, { text: "hi" });
    assert.deepEqual(waits, [1.5]);
    const [first, second] = api.seen;
    const key = first?.headers["idempotency-key"];
    assert.match(String(key), /^b3os-sdk-[0-9a-f]{32}$/);
    assert.equal(second?.headers["idempotency-key"], key);
    assert.equal(second?.body, first?.body);
    assert.equal(retries.length, 1);
    const [retry] = retries;
    assert.deepEqual(
      [retry?.attempt, retry?.maxRetries, retry?.waitS, retry?.method, retry?.path, retry?.idempotencyKey],
      [1, 5, 1.5, "POST", "/v1/actions/call", key],
    );
    assert.ok(retry?.error instanceof RateLimited);
    assert.deepEqual([retry.error.code, retry.error.reason, retry.error.retryAfter], ["rate_limited", "upstream", 1.5]);
  } finally {
    await api.close();
  }
});

test("the wait is a real one of Retry-After seconds when no sleep is given", async () => {
  const api = await serve([error(503, "unavailable", "busy", {}, { "Retry-After": "1" }), OK]);
  try {
    await new B3OS({ apiUrl: api.url, apiKey: "b3_test" }).actions.call(ECHO);
    const [first, second] = api.seen;
    assert.ok(second!.at - first!.at >= 1000, `sent again after ${second!.at - first!.at} ms`);
  } finally {
    await api.close();
  }
});

test("a given key is the one every retry sends, and 503s and in-progress 409s are retried", async () => {
  const api = await serve([
    error(503, "action_unavailable", "down", { reason: "upstream" }, { "Retry-After": "2" }),
    error(409, "idempotency_in_progress", "the first request still runs", {}, { "Retry-After": "1" }),
    OK,
  ]);
  try {
    const { b3os, waits, retries } = recording(api.url);
    await b3os.actions.call(ECHO, {}, { idempotencyKey: "mine-1" });
    assert.deepEqual(waits, [2, 1]);
    assert.deepEqual(
      api.seen.map((s) => s.headers["idempotency-key"]),
      ["mine-1", "mine-1", "mine-1"],
    );
    assert.deepEqual(
      retries.map((r) => [r.attempt, r.idempotencyKey, r.error.code]),
      [
        [1, "mine-1", "action_unavailable"],
        [2, "mine-1", "idempotency_in_progress"],
      ],
    );
    assert.ok(retries[0]?.error instanceof Unavailable && retries[1]?.error instanceof Conflict);
  } finally {
    await api.close();
  }
});

test("retries are bounded, and what is not retried is thrown at once", async () => {
  const api = await serve([error(429, "rate_limited", "slow down", {}, { "Retry-After": "1" })]);
  try {
    const { b3os, waits } = recording(api.url, { maxRetries: 1 });
    const refused = await b3os.actions.call(ECHO).catch((e: unknown) => e);
    assert.ok(refused instanceof RateLimited && refused.retryAfter === 1);
    assert.equal(api.seen.length, 2); // the first request and one retry
    assert.deepEqual(waits, [1]);
    // a Retry-After longer than maxRetryWaitS is thrown at once
    await assert.rejects(b3os.withOptions({ maxRetryWaitS: 0.5 }).actions.call(ECHO), RateLimited);
    assert.equal(api.seen.length, 3);
  } finally {
    await api.close();
  }
  const others = await serve((seen) =>
    seen.url.startsWith("/v1/usage")
      ? error(429, "quota_exceeded", "no Retry-After")
      : error(409, "conflict", "already ended", {}, { "Retry-After": "1" }),
  );
  try {
    const { b3os, waits } = recording(others.url);
    const quota = await b3os.usage().catch((e: unknown) => e);
    assert.ok(quota instanceof RateLimited && quota.retryAfter === null); // no Retry-After: not retried
    await assert.rejects(b3os.runs.cancel("run_1"), Conflict); // a 409 other than in-progress: not retried
    assert.deepEqual([others.seen.length, waits], [2, []]);
  } finally {
    await others.close();
  }
});

test("reads carry no key, and a routine's start and a re-run carry one made for them", async () => {
  const api = await serve([{ status: 200, json: { run_id: "run_1", status: "running" } }]);
  try {
    const { b3os } = recording(api.url);
    await b3os.runs.get("run_1");
    await b3os.routines.run("hello", { name: "ann" });
    await b3os.runs.rerun("run_1", { fromStep: "greet" });
    await b3os.runs.rerun("run_1", { idempotencyKey: "again-1" });
    const keys = api.seen.map((s) => s.headers["idempotency-key"]);
    assert.equal(keys[0], undefined);
    assert.match(String(keys[1]), /^b3os-sdk-/);
    assert.match(String(keys[2]), /^b3os-sdk-/);
    assert.notEqual(keys[1], keys[2]);
    assert.equal(keys[3], "again-1");
    assert.deepEqual(
      api.seen.map((s) => [s.method, s.url, s.body]),
      [
        ["GET", "/v1/runs/run_1", ""],
        ["POST", "/v1/routines/hello/runs", '{"inputs":{"name":"ann"}}'],
        ["POST", "/v1/runs/run_1/rerun", '{"from":"greet"}'],
        ["POST", "/v1/runs/run_1/rerun", "{}"],
      ],
    );
  } finally {
    await api.close();
  }
});

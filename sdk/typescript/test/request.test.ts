import assert from "node:assert/strict";
import { test } from "node:test";

import { B3OS, retryAfterSeconds } from "@b3os/sdk";

import { serve } from "./server.js";

test("path segments are encoded so that no value changes the path, and absent query values are left out", async () => {
  const api = await serve([{ status: 200, json: { pack: "x", version: "1", tools: [], versions: [] } }]);
  try {
    const b3os = new B3OS({ apiUrl: api.url, apiKey: "b3_test" });
    await b3os.actions.getPack("io.b3os", "a/b?c#d");
    await b3os.actions.tools("io.b3os", "open-meteo");
    await b3os.actions.tools("io.b3os", "open-meteo", "1.0.0");
    await b3os.actions.getPackManifest("io.b3os", "open-meteo", "1.0.0+build");
    await b3os.actions.resolve("io.b3os/open-meteo/search-places@1");
    await b3os.actions.cancel({ callId: "tcall_1" });
    await b3os.actions.cancel({ idempotencyKey: "k 1" });
    assert.deepEqual(
      api.seen.map((s) => `${s.method} ${s.url} ${s.body}`),
      [
        "GET /v1/actions/packs/io.b3os/a%2Fb%3Fc%23d ",
        "GET /v1/actions/packs/io.b3os/open-meteo/tools ",
        "GET /v1/actions/packs/io.b3os/open-meteo/tools?version=1.0.0 ",
        "GET /v1/actions/packs/io.b3os/open-meteo/versions/1.0.0%2Bbuild/manifest ",
        "GET /v1/actions/resolve?ref=io.b3os%2Fopen-meteo%2Fsearch-places%401 ",
        "POST /v1/actions/calls/tcall_1/cancel ",
        'POST /v1/actions/call/cancel {"idempotency_key":"k 1"}',
      ],
    );
    await assert.rejects(b3os.runs.get(".."), { name: "RangeError", message: 'run_id may not be ".."' });
    await assert.rejects(b3os.actions.cancel({} as never), {
      message: "cancel takes exactly one of callId and idempotencyKey",
    });
  } finally {
    await api.close();
  }
});

test("Retry-After is read as delay-seconds or an HTTP date, never negative", () => {
  const now = 1_790_000_000_000;
  for (const [value, seconds] of [
    ["2", 2],
    [" 1 ", 1],
    ["1.5", 1.5],
    ["0", 0],
    ["-3", 0],
    ["120", 120],
  ] as const) {
    assert.equal(retryAfterSeconds(value), seconds, value);
  }
  assert.equal(retryAfterSeconds(new Date(now + 30_000).toUTCString(), now), 30);
  assert.equal(retryAfterSeconds("Thu, 01 Jan 1970 00:00:00 GMT", now), 0);
  for (const value of [null, undefined, "", "  ", "soon", "nan", "inf", "Mon, 99 Foo 2026"]) {
    assert.equal(retryAfterSeconds(value), null, String(value));
  }
});

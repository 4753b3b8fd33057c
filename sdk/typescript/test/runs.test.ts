import assert from "node:assert/strict";
import { test } from "node:test";

import { B3OS, type Step, WaitTimedOut } from "@b3os/sdk";

import { serve } from "./server.js";

const BASE = {
  run_id: "run_1",
  routine: "greet",
  routine_version: 1,
  workflow_id: "w",
  inputs: {},
  created_at: "2026-12-04T00:00:00Z",
};
const done = (output: string): Step => ({ status: "succeeded", attempts: 1, output: { text: output } });
const pending: Step = { status: "pending", attempts: 0 };

test("wait tells each step once as it finishes, in the run's order, and returns the ended run", async () => {
  const states = [
    { status: "running", steps: { greet: { status: "running", attempts: 1 }, twice: pending, loud: pending } },
    { status: "running", steps: { greet: done("hello"), twice: { status: "running", attempts: 1 }, loud: pending } },
    { status: "running", steps: { greet: done("hello"), twice: done("hello!"), loud: pending } },
    {
      status: "succeeded",
      outputs: { said: "hello!" },
      steps: { greet: done("hello"), twice: done("hello!"), loud: { status: "skipped", attempts: 0 } },
    },
  ];
  const api = await serve((_, n) => ({ status: 200, json: { ...BASE, ...states[Math.min(n, states.length - 1)] } }));
  try {
    const b3os = new B3OS({ apiUrl: api.url, apiKey: "b3_test" });
    const seen: string[] = [];
    const run = await b3os.runs.wait("run_1", {
      pollIntervalS: 0.05,
      onStep: async (stepId, step) => {
        seen.push(`${stepId}:${step.status}:${JSON.stringify(step.output ?? null)}`);
      },
    });
    assert.equal(run.status, "succeeded");
    assert.deepEqual(run.outputs, { said: "hello!" });
    assert.deepEqual(seen, [
      'greet:succeeded:{"text":"hello"}',
      'twice:succeeded:{"text":"hello!"}',
      "loud:skipped:null",
    ]);
    // the first read answers at once; each later one asks the api to wait for the end
    assert.deepEqual(
      api.seen.map((s) => s.url),
      ["/v1/runs/run_1", ...Array(3).fill("/v1/runs/run_1?wait_s=0.05")],
    );
  } finally {
    await api.close();
  }
});

test("wait gives up after timeoutS with the run as last read", async () => {
  const api = await serve([{ status: 200, json: { ...BASE, status: "running", steps: { greet: pending } } }]);
  try {
    const b3os = new B3OS({ apiUrl: api.url, apiKey: "b3_test" });
    const gaveUp = await b3os.runs.wait("run_1", { pollIntervalS: 0.05, timeoutS: 0.2 }).catch((e: unknown) => e);
    assert.ok(gaveUp instanceof WaitTimedOut);
    assert.equal(gaveUp.message, "run run_1 was still running after 0.2 s");
    assert.equal(gaveUp.runId, "run_1");
    assert.deepEqual((gaveUp.run as { status: string }).status, "running");
  } finally {
    await api.close();
  }
});

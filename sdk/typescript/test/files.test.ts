import assert from "node:assert/strict";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";

import { B3OS, fileBytes } from "@b3os/sdk";

import { bodyOf, serve } from "./server.js";

const ECHO = "com.example.tools/echo/echo@1";
const base64 = (text: string) => Buffer.from(text).toString("base64");

test("file inputs travel as $bytes and a name: bytes, a File, a Blob, a path and a name with data", async () => {
  const output = {
    text: "hi",
    file: { $bytes: base64("\u0000binary"), name: "out.bin", bytes: 7, contentType: "application/octet-stream" },
  };
  const api = await serve([
    { status: 200, json: { call_id: "tcall_1", ref: `${ECHO}.0.0`, tier: "vm", output, cost: {}, timings: {} } },
  ]);
  const dir = await mkdtemp(join(tmpdir(), "b3os-sdk-"));
  try {
    await writeFile(join(dir, "notes.txt"), "from a path\n");
    const b3os = new B3OS({ apiUrl: api.url, apiKey: "b3_test" });
    const answer = await b3os.actions.call<typeof output>(
      ECHO,
      { text: "hi" },
      {
        files: {
          raw: new TextEncoder().encode("raw bytes"),
          file: new File(["a file"], "hello.txt"),
          blob: new Blob(["a blob"]),
          path: { path: join(dir, "notes.txt") },
          pair: { name: "pair.txt", data: new TextEncoder().encode("a pair") },
        },
        timeoutMs: 5000,
      },
    );
    assert.deepEqual(bodyOf(api.seen[0]), {
      ref: ECHO,
      input: {
        text: "hi",
        raw: { $bytes: base64("raw bytes"), name: "raw" },
        file: { $bytes: base64("a file"), name: "hello.txt" },
        blob: { $bytes: base64("a blob"), name: "blob" },
        path: { $bytes: base64("from a path\n"), name: "notes.txt" },
        pair: { $bytes: base64("a pair"), name: "pair.txt" },
      },
      timeout_ms: 5000,
    });
    assert.deepEqual(fileBytes(answer.output.file), new TextEncoder().encode("\u0000binary"));
  } finally {
    await api.close();
    await rm(dir, { recursive: true });
  }
});

test("a file value of no known form is refused naming its field, and nothing is sent", async () => {
  const api = await serve([{ status: 500 }]);
  try {
    const b3os = new B3OS({ apiUrl: api.url, apiKey: "b3_test" });
    const files = { doc: "notes.txt" } as never;
    await assert.rejects(b3os.actions.call(ECHO, {}, { files }), {
      name: "TypeError",
      message: 'files["doc"] must be a Uint8Array, a Blob, { path } or { name, data }, not string',
    });
    await assert.rejects(b3os.actions.call(ECHO, {}, { files: { doc: { path: "/no/such/file" } } }), {
      code: "ENOENT",
    });
    assert.equal(api.seen.length, 0);
  } finally {
    await api.close();
  }
});

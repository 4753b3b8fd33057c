// Calls through the real api (tests/sdk/test_sdk_typescript.py): a file, an HTTP action, a 429 retried,
// typed errors, usage. Prints one JSON line per check.
import { B3OS, fileBytes, type FileOutput, Forbidden, InvalidRequest, NotFound, type Retry } from "@b3os/sdk";

const b3os = new B3OS();
const show = (value: unknown) => console.log(JSON.stringify(value));
const { SEARCH, PUBLIC } = process.env as Record<string, string>;

const echoed = await b3os.actions.call<{ text: string; file: FileOutput }>(
  "com.example.tools/echo/echo@1",
  { text: "hi" },
  { files: { file: new File(["hello\n"], "hello.txt") } },
);
const { file } = echoed.output;
show([echoed.ref, echoed.tier, echoed.output.text, file.name, new TextDecoder().decode(fileBytes(file))]);

const places = await b3os.actions.call<{ places: { name: string }[] }>(SEARCH, { name: "Berlin" });
show([places.output.places[0]?.name, places.cost]);

const retries: Retry[] = [];
const patient = b3os.withOptions({ onRetry: (retry) => retries.push(retry) });
const retried = await patient.actions.call(PUBLIC, { path: "ts-busy-once" });
const told = retries.map((r) => [r.attempt, r.waitS, r.idempotencyKey, r.error.code, r.error.reason]);
show([retried.call_id, retried.output, told]);

const short = await b3os.actions.call(SEARCH, { name: "B" }).catch((e: unknown) => e);
if (!(short instanceof InvalidRequest)) throw short;
show([short.status, short.code, short.message, short.retryAfter, String(short)]);
const missing = await b3os.actions.resolve("io.b3os/open-meteo/nowhere@1").catch((e: unknown) => e);
if (!(missing instanceof NotFound)) throw missing;
show([missing.code, missing.body["missing"]]);
const forbidden = await b3os.routines.list().catch((e: unknown) => e);
if (!(forbidden instanceof Forbidden)) throw forbidden;
show([forbidden.status, forbidden.body["missing_scope"]]);
show((await b3os.usage()).units);

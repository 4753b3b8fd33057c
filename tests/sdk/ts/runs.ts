// A routine through the real api (tests/sdk/test_sdk_typescript.py): stored, run, followed step by step,
// re-run from a step; cancelling the ended run is a Conflict; its cost ceiling, and a start refused by a max
// below it. Prints one JSON line per check.
import { B3OS, Conflict, InvalidRequest } from "@b3os/sdk";

const b3os = new B3OS();
const show = (value: unknown) => console.log(JSON.stringify(value));

const stored = await b3os.routines.create(process.env["GREET"]!);
show([stored.name, stored.version, stored.steps, (await b3os.routines.get("ts-greet")).version]);

const started = await b3os.routines.run("ts-greet", { who: "ann" }, { idempotencyKey: "ts-greet-ann" });
const again = await b3os.routines.run("ts-greet", { who: "ann" }, { idempotencyKey: "ts-greet-ann" });
show([started.status, again.run_id === started.run_id]);

const seen: unknown[] = [];
const run = await b3os.runs.wait(started.run_id, {
  onStep: (stepId, step) => seen.push([stepId, step.status, step.output ?? null]),
});
show([run.status, run.outputs, seen]);

const rerun = await b3os.runs.wait((await b3os.runs.rerun(started.run_id, { fromStep: "twice" })).run_id);
const steps = rerun.steps ?? {};
show([rerun.rerun_of === started.run_id, rerun.status, steps["greet"]?.reused, steps["twice"]?.reused ?? null]);

const ended = await b3os.runs.cancel(started.run_id).catch((e: unknown) => e);
if (!(ended instanceof Conflict)) throw ended;
show([ended.status, ended.code]);

const estimate = await b3os.routines.estimate("ts-greet", { who: "ann" });
const most = (estimate.ceiling_microusd ?? 0) - 1;
const refused = await b3os.routines.run("ts-greet", { who: "ann" }, { maxCostMicrousd: most }).catch((e: unknown) => e);
if (!(refused instanceof InvalidRequest)) throw refused;
show([estimate.ceiling_microusd, estimate.steps.map((s) => [s.id, s.ceiling_microusd]), refused.reason, refused.body["field"]]);

/**
 * `b3os.runs`: read, wait for, cancel, re-run and list routine runs. A run's `status` is `running`,
 * `succeeded`, `failed` or `cancelled`; a step's `pending`, `running`, `succeeded`, `failed`, `skipped`
 * or `cancelled`.
 */

import type { Send } from "./actions.js";
import * as endpoints from "./endpoints.js";
import { WaitTimedOut } from "./errors.js";
import { sleep } from "./options.js";
import type { CancelAccepted, Run, RunSummary, Step } from "./types.js";

/** Called as `onStep(stepId, step)` once for each step when it has finished (or was skipped); awaited. */
export type OnStep = (stepId: string, step: Step) => unknown;

/** How `runs.wait` waits. */
export interface WaitOptions {
  /** Told of each step, in the run's step order, once it has finished. */
  onStep?: OnStep;
  /** The longest one read of the run waits for its end, in seconds (at most 60; default 1). */
  pollIntervalS?: number;
  /** Give up after this many seconds (default: wait as long as the run runs). */
  timeoutS?: number;
}

/** The longest one read of a running run may wait for its end (the api's bound on `wait_s`). */
export const MAX_WAIT_S = 60;
const UNFINISHED = new Set(["pending", "running"]);

/** The steps of `run` that have finished and are not in `shown` yet (added to it), in run order. */
export function newlyFinished(run: Run, shown: Set<string>): [string, Step][] {
  const finished: [string, Step][] = [];
  for (const [stepId, step] of Object.entries(run.steps ?? {})) {
    if (!shown.has(stepId) && !UNFINISHED.has(step.status)) {
      shown.add(stepId);
      finished.push([stepId, step]);
    }
  }
  return finished;
}

/** The routine runs of a `B3OS` client's organization. */
export class Runs {
  readonly #send: Send;

  constructor(send: Send) {
    this.#send = send;
  }

  /**
   * One run as it is now; with `waitS`, a running run once it has ended or `waitS` seconds (at most 60)
   * have passed, whichever comes first.
   *
   * @throws NotFound no run of this organization has that id.
   */
  async get(runId: string, options: { waitS?: number } = {}): Promise<Run> {
    return this.#send(endpoints.getRun(runId, options.waitS));
  }

  /**
   * Wait until a run has ended and return it; tell `onStep` of each step as it finishes.
   *
   * Each read waits up to `pollIntervalS` for the run's end, so the end is seen as it comes and the
   * finished steps every `pollIntervalS`.
   *
   * @returns The ended run (`status` is `succeeded`, `failed` or `cancelled`).
   * @throws WaitTimedOut the run was still running after `timeoutS`.
   */
  async wait(runId: string, options: WaitOptions = {}): Promise<Run> {
    const { onStep, pollIntervalS = 1, timeoutS } = options;
    const deadline = timeoutS === undefined ? null : performance.now() + timeoutS * 1000;
    const shown = new Set<string>();
    let waitS = 0; // the first read answers at once
    for (;;) {
      const asked = performance.now();
      const run = await this.get(runId, { waitS: waitS || undefined });
      for (const [stepId, step] of newlyFinished(run, shown)) await onStep?.(stepId, step);
      if (run.status !== "running") return run;
      if (deadline !== null && performance.now() >= deadline) throw new WaitTimedOut(runId, run, timeoutS ?? 0);
      await sleep(Math.max(0, asked + waitS * 1000 - performance.now()) / 1000); // an api that did not wait
      waitS = Math.min(pollIntervalS, MAX_WAIT_S);
      if (deadline !== null) waitS = Math.max(0, Math.min(waitS, (deadline - performance.now()) / 1000));
    }
  }

  /**
   * Cancel a running run: `{ run_id, status: "cancelling" }`; it ends as `cancelled`.
   *
   * @throws Conflict the run has already ended.
   */
  async cancel(runId: string): Promise<CancelAccepted> {
    return this.#send(endpoints.cancelRun(runId));
  }

  /**
   * Re-run an ended run from a step (default: its first failed step): a new run of the same routine
   * version, inputs and pins that keeps the succeeded steps before that point without calling them.
   *
   * @throws NotFound no such run. Conflict: it still runs, or has no failed step and no `fromStep`.
   * @throws InvalidRequest `fromStep` names no step of the routine.
   */
  async rerun(runId: string, options: { fromStep?: string; idempotencyKey?: string } = {}): Promise<Run> {
    return this.#send(endpoints.rerun(runId, options.fromStep, options.idempotencyKey));
  }

  /** The organization's runs, newest first (of one routine when `routine` is given). */
  async list(options: { routine?: string; limit?: number } = {}): Promise<RunSummary[]> {
    return (await this.#send(endpoints.listRuns(options.routine, options.limit))).runs;
  }
}

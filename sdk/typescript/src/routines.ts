/** `b3os.routines`: store a routine's YAML, read the organization's routines, start a run. */

import type { Send } from "./actions.js";
import * as endpoints from "./endpoints.js";
import type { Routine, RoutineEstimate, Run } from "./types.js";

/** The routines of a `B3OS` client's organization. */
export class Routines {
  readonly #send: Send;

  constructor(send: Send) {
    this.#send = send;
  }

  /**
   * Store a routine under the name its YAML gives (a new version when it exists).
   *
   * @throws InvalidRequest the YAML is not a valid routine (`body.problems`, with lines), or a `uses:` does not resolve.
   */
  async create(yaml: string): Promise<Routine> {
    return this.#send(endpoints.createRoutine(yaml));
  }

  /** One stored routine by name. */
  async get(name: string): Promise<Routine> {
    return this.#send(endpoints.getRoutine(name));
  }

  /** The organization's stored routines. */
  async list(): Promise<Routine[]> {
    return (await this.#send(endpoints.listRoutines())).routines;
  }

  /**
   * Start a run of a stored routine: the run as `runs.get` reads it (`run_id`, `status`, ...).
   *
   * The same Idempotency-Key gives the same run; without one, the SDK makes one for this start, so a
   * start retried after a 429 or 503 never starts two runs. With `maxCostMicrousd` the run starts only when
   * its ceiling (`estimate`) is within it, and stops (failed, the sentence naming the step) before a call
   * that could take it past it.
   *
   * @throws NotFound no routine of that name.
   * @throws InvalidRequest an input does not fit the routine's inputs; or the run's ceiling is above
   *   `maxCostMicrousd` or unbounded (`body.field === "max_cost_microusd"`, with `ceiling_microusd`).
   */
  async run(
    name: string,
    inputs?: Record<string, unknown>,
    options: { idempotencyKey?: string; maxCostMicrousd?: number } = {},
  ): Promise<Run> {
    return this.#send(endpoints.runRoutine(name, inputs, options.idempotencyKey, options.maxCostMicrousd));
  }

  /**
   * The most a run of the routine with these inputs can cost, per step and in all, in micro-USD
   * (`ceiling_microusd` null: unbounded, the steps named in `unbounded`).
   *
   * @param options.yaml a routine file to estimate instead of the stored version (not stored; its name must be `name`).
   * @throws NotFound no routine of that name (and no `yaml`).
   * @throws InvalidRequest the YAML has problems; an input does not fit.
   */
  async estimate(
    name: string,
    inputs?: Record<string, unknown>,
    options: { yaml?: string } = {},
  ): Promise<RoutineEstimate> {
    return this.#send(endpoints.estimateRoutine(name, inputs, options.yaml));
  }
}

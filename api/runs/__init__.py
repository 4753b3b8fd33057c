"""Runs of routines: starting them (with their limits and grants), reading, listing and cancelling them.

`starts` starts a run, a re-run or a schedule's run (a run is one `routine` workflow on the task queue
`b3os-routines`), `launch` makes a start ready in one worker thread, `limits` holds the start limits and
priorities, `grants` what lets a run's steps call actions, `reads` reads, lists and cancels runs (with
`progress` and `waiting`), `rerun` says where a re-run starts and what it keeps. `tables` holds the rows
(`routine_runs`, `run_grants`), `models` the bodies.
"""

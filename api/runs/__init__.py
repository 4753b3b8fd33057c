"""Routines and their runs: stored routines, run records, and the Temporal side of a run.

`tables` holds the rows (`routines`, `routine_runs`); `service` stores routines, starts, reads,
lists and cancels runs (a run is one `routine` workflow on the task queue `b3os-routines`).
"""

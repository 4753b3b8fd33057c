"""The Temporal server settings b3os runs with: what a dev server is started with (`b3os dev`, `make run`, the
tests and the benches) and what deploy/temporal/dynamicconfig.yaml gives the cluster of docker-compose.yml.

`history.transferProcessorMaxPollRPS`: how often a history shard's transfer queue may read the tasks it
was told of, which is how a workflow task or an activity task reaches matching and then a worker.
Temporal's default, 20 reads a second, made a task that came less than 50 ms after the one before wait
for the next read: on an idle dev server each workflow task of a one-step run waited 30-40 ms between
scheduled and started (a bare SDK workflow's one step cost 91 ms of Temporal's time, 16 ms at 1,000
reads a second; docs/performance.md, round 15). A read finds what is there, so more of them cost
little when tasks are few and are batched anyway when they are many.

`matching.numTaskqueueReadPartitions` and `...WritePartitions`: 1 (Temporal's default is 4). Temporal
orders a task queue's backlog by the runs' priority within each partition apart, and a worker's few
pollers are not at every partition at once: with one, a quiet organization's run (priority 1) is next
in the whole queue, not only in its partition (beside 300 every-minute schedules of another
organization, its workflow tasks waited 237 ms in the slowest tenth, 450-641 with 4; docs/performance.md,
round 20). One partition serves the few workers of a b3os deployment; a cluster with many more can
raise it per task queue.

A dev server that keeps its state in a file (`b3os dev`, `make run`) runs SQLite in WAL mode with
`synchronous=normal` (`durable_args`): a history write no longer waits for the file to be synced, which
made a one-activity workflow ~3x slower than on an in-memory server (143-184 ms against 42-49 ms). Runs
still survive a crash or a restart of the Temporal process; only a power loss may lose the last
transactions. `B3OS_TEMPORAL_SYNCHRONOUS=full` syncs every commit again.
"""

from __future__ import annotations

DYNAMIC_CONFIG: dict[str, int] = {
    "history.transferProcessorMaxPollRPS": 1000,
    "matching.numTaskqueueReadPartitions": 1,
    "matching.numTaskqueueWritePartitions": 1,
}
"""Temporal dynamic config keys and values (global: no constraints)."""


SYNCHRONOUS = ("normal", "full")
"""The SQLite `synchronous` settings a file-backed dev server may run with (the first is the default)."""


def durable_args(db_file: str, synchronous: str = SYNCHRONOUS[0]) -> list[str]:
    """`temporal server start-dev` arguments that keep its state in `db_file`, in WAL mode.

    Raises:
        ValueError: `synchronous` is not one of SYNCHRONOUS.
    """
    if synchronous not in SYNCHRONOUS:
        raise ValueError(
            f"B3OS_TEMPORAL_SYNCHRONOUS must be one of {', '.join(SYNCHRONOUS)}, not {synchronous!r}"
        )
    return [
        "--db-filename", db_file,
        "--sqlite-pragma", "journal_mode=wal",
        "--sqlite-pragma", f"synchronous={synchronous}",
    ]  # fmt: skip


def dev_server_args() -> list[str]:
    """`temporal server start-dev` arguments that set `DYNAMIC_CONFIG`."""
    args: list[str] = []
    for key, value in DYNAMIC_CONFIG.items():
        args += ["--dynamic-config-value", f"{key}={value}"]
    return args

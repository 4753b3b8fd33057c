"""The Temporal server settings b3os runs with: what a dev server is started with (`b3os dev`, `make run`, the
tests and the benches) and what deploy/temporal/dynamicconfig.yaml gives the cluster of docker-compose.yml.

`history.transferProcessorMaxPollRPS`: how often a history shard's transfer queue may read the tasks it
was told of, which is how a workflow task or an activity task reaches matching and then a worker.
Temporal's default, 20 reads a second, made a task that came less than 50 ms after the one before wait
for the next read: on an idle dev server each workflow task of a one-step run waited 30-40 ms between
scheduled and started (a bare SDK workflow's one step cost 91 ms of Temporal's time, 16 ms at 1,000
reads a second; docs/performance.md, round 15). A read finds what is there, so more of them cost
little when tasks are few and are batched anyway when they are many.
"""

from __future__ import annotations

DYNAMIC_CONFIG: dict[str, int] = {
    "history.transferProcessorMaxPollRPS": 1000,
}
"""Temporal dynamic config keys and values (global: no constraints)."""


def dev_server_args() -> list[str]:
    """`temporal server start-dev` arguments that set `DYNAMIC_CONFIG`."""
    args: list[str] = []
    for key, value in DYNAMIC_CONFIG.items():
        args += ["--dynamic-config-value", f"{key}={value}"]
    return args

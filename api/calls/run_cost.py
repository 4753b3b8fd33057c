"""A run's max cost, held at each of its steps' calls.

A run started with `max_cost_microusd` (api.runs.launch refused it if its ceiling was above) carries the max
in its grant. Each of its steps' calls is admitted with its ceiling, the most it can cost
(api.calls.costs.call_ceiling), written on its row; in the admission's transaction, after that row is
written, `check` adds up what the run's ended calls were charged and the ceilings of its running calls (this
one included): the run's sum (`api.calls.spend`) and its running rows, in one statement (one snapshot: a
call ending meanwhile is counted in one or the other). Past the max the call is refused for good (403
`forbidden`, reason `max_cost`, no Retry-After: the step fails and the run ends failed with this
sentence) and its row is rolled back. The admission's lock (SQLite's one writer; PostgreSQL's advisory
lock on the organization) orders the run's calls, so two of them at once (foreach items, parallel steps)
never both pass: a run's charges never pass its max.
"""

from __future__ import annotations

from sqlalchemy import bindparam, func
from sqlalchemy import select as sa_select

from api import rawsql
from api.calls import spend
from api.calls.errors import RunMaxCost
from api.calls.tables import RUNNING, ActionCall
from api.rawsql import Transaction

_CALLS = ActionCall.__table__  # type: ignore[attr-defined]
_HELD = (
    sa_select(func.sum(_CALLS.c.ceiling_microusd))
    .where(_CALLS.c.run_id == bindparam("run"), _CALLS.c.state == RUNNING)
    .scalar_subquery()
)  # (index ix_action_calls_run_state: the run's running rows only)
# built once: each call of a run with a max reads it
_RUN_COST = sa_select(spend.run_total_of(bindparam("run")), _HELD)


def check(session: Transaction, *, run_id: str, step: str, most: int, ceiling: int) -> None:
    """Refuse the call just admitted (its row written, `ceiling` its own) when the run could pass `most`.

    Args:
        session: the admission's transaction.
        run_id: the run. step: `<step id>` or `<step id>/<index>`, for the sentence.
        most: the run's max_cost_microusd. ceiling: this call's ceiling.

    Raises:
        RunMaxCost: 403 forbidden, reason max_cost.
    """
    row = rawsql.execute(session, _RUN_COST, {"run": run_id}).first()
    charged, held = int(row[0] or 0), int(row[1] or 0)
    if charged + held <= most:
        return
    step_id, _, item = step.partition("/")
    which = f"step {step_id}" + (f" (item {item})" if item else "")
    others = held - ceiling
    raise RunMaxCost(
        f"Run {run_id} stopped at {which}: its call may cost up to {ceiling} micro-USD, which with the "
        f"{charged} micro-USD the run's calls were charged so far"
        + (f" and the {others} held by its calls still running" if others else "")
        + f" could take the run past its max_cost_microusd of {most}; the call was not made.",
        reason="max_cost",
        details={
            "step": step,
            "max_cost_microusd": most,
            "charged_microusd": charged,
            "ceiling_microusd": ceiling,
        },
    )

"""A key's month in `key_spend` also holds its calls, their compute and floor charges and their units
(`api.calls.spend.SUMS`), so that `GET /v1/usage` reads an organization's key rows of the month rather
than every call and meter event of it (`api.calls.metering.usage`). Every call that ended done now has
its key's row, free or not. `ix_action_calls_org_finished` and `ix_meter_events_org_at` go: the usage
was the only statement to read them, and each call's writes kept them.

The sums are made again from what is stored: each key's calls that ended done, by the month they ended
in (`finished_at`, UTC), and their meter events by the month they were recorded in (`at`: the same
moment). The downgrade drops the new columns and puts the two indexes back; the rows it leaves keep
their price and total, as revision 0015 would have summed them.

Frozen: every definition is written out here, never read from the models.

Revision ID: 0016_usage_sums
Revises: 0015_sums_and_indexes
Create Date: 2026-12-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0016_usage_sums"
down_revision: str | None = "0015_sums_and_indexes"
branch_labels: str | None = None
depends_on: str | None = None

_CHARGES = ("calls", "compute", "floor")
_UNITS = {
    "vcpu_ms": "actions.vcpu_ms",
    "gib_ms": "actions.gib_ms",
    "tool_calls": "actions.tool_call",
    "publisher_microusd": "actions.publisher_microusd",
    "action_calls": "actions.call",
}


def _month(column: str) -> str:
    if op.get_bind().dialect.name == "postgresql":
        return f"to_char({column} AT TIME ZONE 'UTC', 'YYYY-MM')"
    return f"substr({column}, 1, 7)"  # SQLite keeps a timestamp as text, `YYYY-MM-DD HH:MM:SS...`, in UTC


def upgrade() -> None:
    with op.batch_alter_table("key_spend") as batch:
        for name in (*_CHARGES, *_UNITS):
            batch.add_column(sa.Column(name, sa.BigInteger(), nullable=False, server_default="0"))
    op.drop_index("ix_action_calls_org_finished", table_name="action_calls")
    op.drop_index("ix_meter_events_org_at", table_name="meter_events")
    ended, at = _month("finished_at"), _month("at")
    units = ", ".join(
        f"SUM(CASE WHEN unit = '{unit}' THEN quantity ELSE 0 END) AS {name}" for name, unit in _UNITS.items()
    )
    op.execute("DELETE FROM key_spend")
    op.execute(
        "INSERT INTO key_spend (key_id, month, org_id, price, total, calls, compute, floor, "
        + ", ".join(_UNITS)
        + ") SELECT c.key_id, c.month, c.org_id, c.price, c.total, c.calls, c.compute, c.floor, "
        + ", ".join(f"COALESCE(u.{name}, 0)" for name in _UNITS)
        + " FROM (SELECT key_id, "
        + ended
        + " AS month, MIN(org_id) AS org_id, SUM(price) AS price, SUM(total) AS total, COUNT(*) AS calls,"
        " SUM(compute) AS compute, SUM(floor) AS floor FROM action_calls"
        " WHERE state = 'done' AND finished_at IS NOT NULL GROUP BY key_id, "
        + ended
        + ") AS c LEFT JOIN (SELECT key_id, "
        + at
        + " AS month, "
        + units
        + " FROM meter_events GROUP BY key_id, "
        + at
        + ") AS u ON u.key_id = c.key_id AND u.month = c.month"
    )


def downgrade() -> None:
    op.create_index("ix_meter_events_org_at", "meter_events", ["org_id", "at"], unique=False)
    op.create_index(
        "ix_action_calls_org_finished", "action_calls", ["org_id", "state", "finished_at"], unique=False
    )
    op.execute("DELETE FROM key_spend WHERE total <= 0")
    with op.batch_alter_table("key_spend") as batch:
        for name in (*_UNITS, *reversed(_CHARGES)):
            batch.drop_column(name)

"""What ended calls were charged, added up: `key_spend` (per key and month, UTC, as `YYYY-MM`) and
`run_charges` (per run), written as each call ends (`api.calls.spend`), so that an admission reads one
row rather than every call of the month or of the run. `ix_action_calls_run_state` (run_id, state)
replaces `ix_action_calls_run_id`: a run's running calls are read without its ended ones.

`action_calls` keeps every call, so no statement may read it whole: `ix_action_calls_action_finished` (an
action version's last finished calls, for a refused call's Retry-After), `ix_action_calls_state_lease`
(the running calls: admission's counts and the sweep of ended leases) and `ix_action_calls_org_finished`
(an organization's usage over a period; it replaces `ix_action_calls_org_state`). `ix_action_calls_node_state`
and `ix_action_calls_key_started` go: no statement uses them since, and each call's writes kept them.
`ix_routine_runs_org_routine_created` lists one routine's runs (`GET /v1/runs?routine=`) without reading
every run of the organization.

The sums start from the calls already stored: every row no longer running, grouped as the api groups
them (a call counts in the month it ended in, its `finished_at`, as the usage counts it). The downgrade
drops the two tables and the new indexes, and puts the old ones back.

Frozen: every definition is written out here, never read from the models.

Revision ID: 0015_sums_and_indexes
Revises: 0014_run_cost_ceiling
Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0015_sums_and_indexes"
down_revision: str | None = "0014_run_cost_ceiling"
branch_labels: str | None = None
depends_on: str | None = None

_GONE = {
    "org_state": ["org_id", "state"],
    "node_state": ["node_id", "state"],
    "key_started": ["key_id", "started_at"],
}


def upgrade() -> None:
    op.create_table(
        "key_spend",
        sa.Column("key_id", sa.String(length=40), nullable=False),
        sa.Column("month", sa.String(length=7), nullable=False),
        sa.Column("org_id", sa.String(length=40), nullable=False),
        sa.Column("price", sa.BigInteger(), nullable=False),
        sa.Column("total", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("key_id", "month"),
    )
    op.create_index("ix_key_spend_org_month", "key_spend", ["org_id", "month"], unique=False)
    op.create_table(
        "run_charges",
        sa.Column("run_id", sa.String(length=40), nullable=False),
        sa.Column("total", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("run_id"),
    )
    op.drop_index("ix_action_calls_run_id", table_name="action_calls")
    op.create_index("ix_action_calls_run_state", "action_calls", ["run_id", "state"], unique=False)
    op.create_index(
        "ix_action_calls_action_finished",
        "action_calls",
        ["pack", "version", "action", "state", "finished_at"],
        unique=False,
    )
    op.create_index(
        "ix_action_calls_state_lease", "action_calls", ["state", "lease_expires_at"], unique=False
    )
    op.create_index(
        "ix_action_calls_org_finished", "action_calls", ["org_id", "state", "finished_at"], unique=False
    )
    for name in _GONE:
        op.drop_index(f"ix_action_calls_{name}", table_name="action_calls")
    op.create_index(
        "ix_routine_runs_org_routine_created",
        "routine_runs",
        ["org_id", "routine_name", "created_at"],
        unique=False,
    )
    if op.get_bind().dialect.name == "postgresql":
        month = "to_char(finished_at AT TIME ZONE 'UTC', 'YYYY-MM')"
    else:  # SQLite keeps a timestamp as text, `YYYY-MM-DD HH:MM:SS...`, in UTC
        month = "substr(finished_at, 1, 7)"
    op.execute(
        "INSERT INTO key_spend (key_id, month, org_id, price, total)"
        f" SELECT key_id, {month}, MIN(org_id), SUM(price), SUM(total) FROM action_calls"
        f" WHERE state <> 'running' AND total > 0 AND finished_at IS NOT NULL GROUP BY key_id, {month}"
    )
    op.execute(
        "INSERT INTO run_charges (run_id, total) SELECT run_id, SUM(total) FROM action_calls"
        " WHERE run_id IS NOT NULL AND state <> 'running' AND total > 0 GROUP BY run_id"
    )


def downgrade() -> None:
    op.drop_index("ix_routine_runs_org_routine_created", table_name="routine_runs")
    for name, columns in _GONE.items():
        op.create_index(f"ix_action_calls_{name}", "action_calls", columns, unique=False)
    op.drop_index("ix_action_calls_org_finished", table_name="action_calls")
    op.drop_index("ix_action_calls_state_lease", table_name="action_calls")
    op.drop_index("ix_action_calls_action_finished", table_name="action_calls")
    op.drop_index("ix_action_calls_run_state", table_name="action_calls")
    op.create_index("ix_action_calls_run_id", "action_calls", ["run_id"], unique=False)
    op.drop_table("run_charges")
    op.drop_index("ix_key_spend_org_month", table_name="key_spend")
    op.drop_table("key_spend")

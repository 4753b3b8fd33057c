"""A run's cost ceiling: `routine_runs.max_cost_microusd` and `run_grants.max_cost_microusd` (the most the
run that started with `max_cost_microusd` may cost), `action_calls.run_id` (the run a routine step's call
belongs to, so that the run's charges add up) and `action_calls.ceiling_microusd` (the most that call can
cost, held against its run's max while it runs).

NULL for every row before: runs without a max, calls of no run. The downgrade drops them.

Frozen: every definition is written out here, never read from the models.

Revision ID: 0014_run_cost_ceiling
Revises: 0013_triggers
Create Date: 2026-12-04
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0014_run_cost_ceiling"
down_revision: str | None = "0013_triggers"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    op.add_column("routine_runs", sa.Column("max_cost_microusd", sa.BigInteger(), nullable=True))
    op.add_column("run_grants", sa.Column("max_cost_microusd", sa.BigInteger(), nullable=True))
    op.add_column("action_calls", sa.Column("run_id", sa.String(length=40), nullable=True))
    op.add_column("action_calls", sa.Column("ceiling_microusd", sa.BigInteger(), nullable=True))
    op.create_index("ix_action_calls_run_id", "action_calls", ["run_id"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_action_calls_run_id", table_name="action_calls")
    with op.batch_alter_table("action_calls") as batch:
        batch.drop_column("ceiling_microusd")
        batch.drop_column("run_id")
    op.drop_column("run_grants", "max_cost_microusd")
    op.drop_column("routine_runs", "max_cost_microusd")

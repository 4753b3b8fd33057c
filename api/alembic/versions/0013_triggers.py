"""`trigger_subscriptions` and `trigger_deliveries`: routines' subscriptions to packs' triggers, and each
delivery received with what became of it (issue 40); `routine_runs.event`, the event a run started with.

Frozen: every definition is written out here, never read from the models.

Revision ID: 0013_triggers
Revises: 0012_schedule_temporal_id
Create Date: 2026-12-04
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0013_triggers"
down_revision: str | None = "0012_schedule_temporal_id"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    op.create_table(
        "trigger_subscriptions",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("org_id", sa.String(length=40), nullable=False),
        sa.Column("routine_name", sa.String(length=63), nullable=False),
        sa.Column("key_id", sa.String(length=40), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("trigger", sa.String(length=300), nullable=False),
        sa.Column("pin", sa.String(length=300), nullable=False),
        sa.Column("kind", sa.String(length=10), nullable=False),
        sa.Column("with_input", sa.JSON(), nullable=False),
        sa.Column("connection", sa.String(length=64), nullable=True),
        sa.Column("inputs", sa.JSON(), nullable=False),
        sa.Column("cursor", sa.JSON(), nullable=True),
        sa.Column("polled_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("ended_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index(
        "ix_trigger_subscriptions_org_routine",
        "trigger_subscriptions",
        ["org_id", "routine_name"],
        unique=False,
    )
    op.create_table(
        "trigger_deliveries",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("subscription_id", sa.String(length=64), nullable=False),
        sa.Column("org_id", sa.String(length=40), nullable=False),
        sa.Column("received_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("verified", sa.Boolean(), nullable=False),
        sa.Column("status", sa.String(length=12), nullable=False),
        sa.Column("reason", sa.String(length=1000), nullable=True),
        sa.Column("event_id", sa.String(length=200), nullable=True),
        sa.Column("dedupe", sa.String(length=200), nullable=True),
        sa.Column("event", sa.JSON(), nullable=True),
        sa.Column("run_id", sa.String(length=40), nullable=True),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("last_error", sa.String(length=1000), nullable=True),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index(
        "ix_trigger_deliveries_subscription_received",
        "trigger_deliveries",
        ["subscription_id", "received_at"],
        unique=False,
    )
    op.create_index(
        "ix_trigger_deliveries_subscription_dedupe",
        "trigger_deliveries",
        ["subscription_id", "dedupe"],
        unique=True,
    )
    op.create_index("ix_trigger_deliveries_status", "trigger_deliveries", ["status"], unique=False)
    op.add_column("routine_runs", sa.Column("event", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("routine_runs") as batch:
        batch.drop_column("event")
    op.drop_table("trigger_deliveries")
    op.drop_table("trigger_subscriptions")

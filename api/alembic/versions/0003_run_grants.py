"""Run grants: what lets a routine run's steps call actions, minted when the api starts the run.

Adds `run_grants` (api.runs.tables.RunGrant): the sha256 of each run's grant, the run, organization,
key and workflow it is bound to, its expiry, and when the run was cancelled or seen to end. Runs
started before this revision have no grant: their next step call is refused (see docs/routines.md).

Frozen: every definition is written out here, never read from the models.

Revision ID: 0003_run_grants
Revises: 0002_node_credentials
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0003_run_grants"
down_revision: str | None = "0002_node_credentials"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    op.create_table(
        "run_grants",
        sa.Column("grant_hash", sa.String(length=64), nullable=False),
        sa.Column("run_id", sa.String(length=40), nullable=False),
        sa.Column("org_id", sa.String(length=40), nullable=False),
        sa.Column("key_id", sa.String(length=40), nullable=False),
        sa.Column("workflow_id", sa.String(length=200), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("cancelled_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("ended_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("grant_hash"),
    )
    op.create_index("ix_run_grants_run_id", "run_grants", ["run_id"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_run_grants_run_id", table_name="run_grants")
    op.drop_table("run_grants")

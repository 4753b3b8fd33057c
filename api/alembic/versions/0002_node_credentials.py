"""Node credentials: one per node id, issued by an operator command, revocable.

Frozen: the table is written out here, never read from the models.

Revision ID: 0002_node_credentials
Revises: 0001_baseline
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0002_node_credentials"
down_revision: str | None = "0001_baseline"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    op.create_table(
        "node_credentials",
        sa.Column("node_id", sa.String(length=100), nullable=False),
        sa.Column("prefix", sa.String(length=40), nullable=False),
        sa.Column("secret_hash", sa.String(length=64), nullable=False),
        sa.Column("call_key", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("node_id"),
        sa.UniqueConstraint("prefix"),
    )


def downgrade() -> None:
    op.drop_table("node_credentials")

"""`nodes.bad_until`: a node whose answer did not carry its proof gets no calls until then.

NULL for every node until its first unproven answer. The downgrade drops it.

Frozen: every definition is written out here, never read from the models.

Revision ID: 0009_node_bad_until
Revises: 0008_run_grant_binding
Create Date: 2026-12-04
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0009_node_bad_until"
down_revision: str | None = "0008_run_grant_binding"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    op.add_column("nodes", sa.Column("bad_until", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    op.drop_column("nodes", "bad_until")

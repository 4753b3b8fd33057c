"""Node credentials: one per node id, issued by an operator command, revocable (issue 12, item 2).

Revision ID: 0002_node_credentials
Revises: 0001_baseline
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa  # noqa: F401
from alembic import op  # noqa: F401

revision: str = "0002_node_credentials"
down_revision: str | None = "0001_baseline"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    pass


def downgrade() -> None:
    pass

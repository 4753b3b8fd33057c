"""Run grants: what lets a routine run's steps call actions, minted when the api starts the run (issue 12, item 1).

Revision ID: 0003_run_grants
Revises: 0002_node_credentials
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa  # noqa: F401
from alembic import op  # noqa: F401

revision: str = "0003_run_grants"
down_revision: str | None = "0002_node_credentials"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    pass


def downgrade() -> None:
    pass

"""`run_grants.cleanup_steps`: the steps of a run that may still call once it is cancelled.

The ids of the steps whose `if:` calls `always()` or `cancelled()` (the routine's cleanup), as a JSON
list; grants minted before this revision have none (`[]`), as before. The downgrade drops the column.

Frozen: every definition is written out here, never read from the models.

Revision ID: 0007_run_grant_cleanup
Revises: 0006_action_calls
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0007_run_grant_cleanup"
down_revision: str | None = "0006_action_calls"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:  # ALTER TABLE ... ADD COLUMN, on SQLite too (a default fills the rows there)
    empty = sa.text("'[]'")
    op.add_column("run_grants", sa.Column("cleanup_steps", sa.JSON(), nullable=False, server_default=empty))


def downgrade() -> None:
    op.drop_column("run_grants", "cleanup_steps")

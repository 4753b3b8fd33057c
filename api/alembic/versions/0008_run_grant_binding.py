"""`run_grants.steps` and `run_grants.execution_id`: a grant serves its own run's steps and execution only.

`steps` maps each step id of the run's routine version to the pinned ref it calls (a JSON object; grants
minted before this revision have none, `{}`, and call as before until they expire). `execution_id` is the
Temporal run id of the workflow the api started (NULL until it is known). The downgrade drops both.

Frozen: every definition is written out here, never read from the models.

Revision ID: 0008_run_grant_binding
Revises: 0007_run_grant_cleanup
Create Date: 2026-12-04
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0008_run_grant_binding"
down_revision: str | None = "0007_run_grant_cleanup"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:  # ALTER TABLE ... ADD COLUMN, on SQLite too (a default fills the rows there)
    empty = sa.text("'{}'")
    op.add_column("run_grants", sa.Column("steps", sa.JSON(), nullable=False, server_default=empty))
    op.add_column("run_grants", sa.Column("execution_id", sa.String(length=64), nullable=True))


def downgrade() -> None:
    op.drop_column("run_grants", "execution_id")
    op.drop_column("run_grants", "steps")

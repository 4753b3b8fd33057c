"""`tool_calls` is `action_calls` (issue 35): the table holds every admitted action call, HTTP actions' too.

Renames the table and its four indexes (`ix_tool_calls_*` -> `ix_action_calls_*`); its rows, columns and
keys are unchanged. The downgrade renames them back.

Frozen: every definition is written out here, never read from the models.

Revision ID: 0006_action_calls
Revises: 0005_blobs
Create Date: 2027-01-12
"""

from __future__ import annotations

from alembic import op

revision: str = "0006_action_calls"
down_revision: str | None = "0005_blobs"
branch_labels: str | None = None
depends_on: str | None = None

INDEXES = {
    "org_state": ["org_id", "state"],
    "node_state": ["node_id", "state"],
    "org_started": ["org_id", "started_at"],
    "key_started": ["key_id", "started_at"],
}


def _rename(old: str, new: str) -> None:
    for suffix in INDEXES:
        op.drop_index(f"ix_{old}_{suffix}", table_name=old)
    op.rename_table(old, new)
    for suffix, columns in INDEXES.items():
        op.create_index(f"ix_{new}_{suffix}", new, columns, unique=False)


def upgrade() -> None:
    _rename("tool_calls", "action_calls")


def downgrade() -> None:
    _rename("action_calls", "tool_calls")

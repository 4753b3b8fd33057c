"""Blob bytes in the database (issue 15, item 2).

Adds `blobs`: a blob's bytes by their sha256, used when the blob store is the database
(`B3OS_BLOB_STORE=database`), so api processes with separate disks serve one registry. Blobs stored on
disk before this revision stay there; nothing is copied.

Frozen: every definition is written out here, never read from the models.

Revision ID: 0005_blobs
Revises: 0004_routine_versions
Create Date: 2026-12-07
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0005_blobs"
down_revision: str | None = "0004_routine_versions"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    op.create_table(
        "blobs",
        sa.Column("sha256", sa.String(length=64), nullable=False),
        sa.Column("size", sa.BigInteger(), nullable=False),
        sa.Column("data", sa.LargeBinary(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("sha256"),
    )


def downgrade() -> None:
    op.drop_table("blobs")

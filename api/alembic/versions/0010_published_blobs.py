"""`published_blobs`: the blobs some published pack version holds, the only ones a node may read.

Filled from every pack version published so far (`pack_versions.files`), then by each publish in its own
transaction. The downgrade drops it.

Frozen: every definition is written out here, never read from the models.

Revision ID: 0010_published_blobs
Revises: 0009_node_bad_until
Create Date: 2026-12-04
"""

from __future__ import annotations

import json

import sqlalchemy as sa
from alembic import op

revision: str = "0010_published_blobs"
down_revision: str | None = "0009_node_bad_until"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    table = op.create_table(
        "published_blobs",
        sa.Column("sha256", sa.String(length=64), primary_key=True),
    )
    digests: set[str] = set()
    for (files,) in op.get_bind().execute(sa.text("SELECT files FROM pack_versions")):
        for file in json.loads(files) if isinstance(files, str) else files:
            digests.add(str(file["sha256"]))
    if digests:
        op.bulk_insert(table, [{"sha256": d} for d in sorted(digests)])


def downgrade() -> None:
    op.drop_table("published_blobs")

"""`connections.hosts`: the hosts a connection's secret is sent to, as sealed with it, shown to its owner.

Rows stored before this revision get the hosts the connection has in its pack's most recently published
version (what was sealed when that version was the newest; `[]` when the pack no longer declares it).
The downgrade drops the column.

Frozen: every definition is written out here, never read from the models.

Revision ID: 0011_connection_hosts
Revises: 0010_published_blobs
Create Date: 2026-12-04
"""

from __future__ import annotations

import json
from typing import Any

import sqlalchemy as sa
from alembic import op

revision: str = "0011_connection_hosts"
down_revision: str | None = "0010_published_blobs"
branch_labels: str | None = None
depends_on: str | None = None


def _json(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) else value


def upgrade() -> None:
    op.add_column(
        "connections", sa.Column("hosts", sa.JSON(), nullable=False, server_default=sa.text("'[]'"))
    )
    bind = op.get_bind()
    latest: dict[str, Any] = {}
    for pack, manifest in bind.execute(sa.text("SELECT pack, manifest FROM pack_versions ORDER BY seq")):
        latest[pack] = _json(manifest)
    connections = sa.table("connections", sa.column("id"), sa.column("hosts", sa.JSON()))
    for row_id, pack, key in bind.execute(sa.text("SELECT id, pack, connection FROM connections")):
        declared = (latest.get(pack) or {}).get("connections") or []
        hosts = next((c.get("hosts") or [] for c in declared if c.get("key") == key), [])
        bind.execute(connections.update().where(connections.c.id == row_id).values(hosts=hosts))


def downgrade() -> None:
    op.drop_column("connections", "hosts")

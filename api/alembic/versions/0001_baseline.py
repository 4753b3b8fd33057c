"""Baseline: the whole schema as the migrations before alembic left it (their `schema_version` 5).

The tables come in the five groups of those old migrations, in their order, so that a database they
left at an older version gets only the groups it lacks (`api.migrations` passes that version as
`legacy_schema_version`; a database at 5 is stamped here without running anything).

Frozen: every definition is written out here, never read from the models. Change the schema with a
new revision.

Revision ID: 0001_baseline
Revises:
Create Date: 2026-11-30
"""

from __future__ import annotations

from collections.abc import Callable

import sqlalchemy as sa
from alembic import op

revision: str = "0001_baseline"
down_revision: str | None = None
branch_labels: str | None = None
depends_on: str | None = None


def _timestamp() -> sa.DateTime:
    return sa.DateTime(timezone=True)


def _accounts_and_registry() -> None:
    """Old migration 1: organizations, api keys, publishers, signing keys, blobs, packs, nodes."""
    op.create_table(
        "organizations",
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("is_operator", sa.Boolean(), nullable=False),
        sa.Column("created_at", _timestamp(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_table(
        "api_keys",
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("scopes", sa.JSON(), nullable=False),
        sa.Column("monthly_spend_cap_microusd", sa.BigInteger(), nullable=True),
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("org_id", sa.String(length=40), nullable=False),
        sa.Column("prefix", sa.String(length=40), nullable=False),
        sa.Column("key_hash", sa.String(length=64), nullable=False),
        sa.Column("created_at", _timestamp(), nullable=False),
        sa.Column("revoked_at", _timestamp(), nullable=True),
        sa.ForeignKeyConstraint(["org_id"], ["organizations.id"]),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("prefix"),
    )
    op.create_index("ix_api_keys_org_id", "api_keys", ["org_id"], unique=False)
    op.create_table(
        "publishers",
        sa.Column("namespace", sa.String(length=200), nullable=False),
        sa.Column("org_id", sa.String(length=40), nullable=False),
        sa.Column("created_at", _timestamp(), nullable=False),
        sa.ForeignKeyConstraint(["org_id"], ["organizations.id"]),
        sa.PrimaryKeyConstraint("namespace"),
    )
    op.create_index("ix_publishers_org_id", "publishers", ["org_id"], unique=False)
    op.create_table(
        "signing_keys",
        sa.Column("kid", sa.String(length=300), nullable=False),
        sa.Column("public_key", sa.String(length=100), nullable=False),
        sa.Column("namespace", sa.String(length=200), nullable=False),
        sa.Column("created_at", _timestamp(), nullable=False),
        sa.Column("revoked_at", _timestamp(), nullable=True),
        sa.ForeignKeyConstraint(["namespace"], ["publishers.namespace"]),
        sa.PrimaryKeyConstraint("kid"),
    )
    op.create_index("ix_signing_keys_namespace", "signing_keys", ["namespace"], unique=False)
    op.create_table(
        "blob_uploads",
        sa.Column("sha256", sa.String(length=64), nullable=False),
        sa.Column("org_id", sa.String(length=40), nullable=False),
        sa.Column("bytes", sa.BigInteger(), nullable=False),
        sa.Column("created_at", _timestamp(), nullable=False),
        sa.ForeignKeyConstraint(["org_id"], ["organizations.id"]),
        sa.PrimaryKeyConstraint("sha256", "org_id"),
    )
    op.create_table(
        "packs",
        sa.Column("id", sa.String(length=300), nullable=False),
        sa.Column("namespace", sa.String(length=200), nullable=False),
        sa.Column("created_at", _timestamp(), nullable=False),
        sa.ForeignKeyConstraint(["namespace"], ["publishers.namespace"]),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_packs_namespace", "packs", ["namespace"], unique=False)
    op.create_table(
        "pack_versions",
        sa.Column("pack", sa.String(length=300), nullable=False),
        sa.Column("version", sa.String(length=100), nullable=False),
        sa.Column("content_hash", sa.String(length=80), nullable=False),
        sa.Column("kid", sa.String(length=300), nullable=False),
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("major", sa.Integer(), nullable=False),
        sa.Column("minor", sa.Integer(), nullable=False),
        sa.Column("patch", sa.Integer(), nullable=False),
        sa.Column("prerelease", sa.String(length=100), nullable=False),
        sa.Column("manifest", sa.JSON(), nullable=False),
        sa.Column("files", sa.JSON(), nullable=False),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.Column("org_id", sa.String(length=40), nullable=False),
        sa.Column("published_by", sa.String(length=40), nullable=False),
        sa.Column("published_at", _timestamp(), nullable=False),
        sa.ForeignKeyConstraint(["org_id"], ["organizations.id"]),
        sa.ForeignKeyConstraint(["pack"], ["packs.id"]),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("pack", "version", name="uq_pack_versions_pack_version"),
        sa.UniqueConstraint("seq"),
    )
    op.create_index("ix_pack_versions_pack", "pack_versions", ["pack"], unique=False)
    op.create_table(
        "nodes",
        sa.Column("node_id", sa.String(length=100), nullable=False),
        sa.Column("url", sa.String(length=500), nullable=False),
        sa.Column("slots_total", sa.Integer(), nullable=False),
        sa.Column("slots_free", sa.Integer(), nullable=False),
        sa.Column("installed", sa.JSON(), nullable=False),
        sa.Column("first_seen", _timestamp(), nullable=False),
        sa.Column("last_seen", _timestamp(), nullable=False),
        sa.PrimaryKeyConstraint("node_id"),
    )


def _calls() -> None:
    """Old migration 2: tool_calls, meter_events, idempotency_records."""
    op.create_table(
        "tool_calls",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("org_id", sa.String(length=40), nullable=False),
        sa.Column("key_id", sa.String(length=40), nullable=False),
        sa.Column("surface", sa.String(length=20), nullable=False),
        sa.Column("pack", sa.String(length=300), nullable=False),
        sa.Column("version", sa.String(length=100), nullable=False),
        sa.Column("action", sa.String(length=200), nullable=False),
        sa.Column("node_id", sa.String(length=100), nullable=False),
        sa.Column("state", sa.String(length=20), nullable=False),
        sa.Column("timeout_ms", sa.Integer(), nullable=False),
        sa.Column("price_microusd", sa.BigInteger(), nullable=False),
        sa.Column("started_at", _timestamp(), nullable=False),
        sa.Column("deadline_at", _timestamp(), nullable=False),
        sa.Column("lease_expires_at", _timestamp(), nullable=False),
        sa.Column("finished_at", _timestamp(), nullable=True),
        sa.Column("status", sa.Integer(), nullable=True),
        sa.Column("code", sa.String(length=60), nullable=True),
        sa.Column("reason", sa.String(length=60), nullable=True),
        sa.Column("ran", sa.Boolean(), nullable=False),
        sa.Column("vcpu_ms", sa.BigInteger(), nullable=False),
        sa.Column("gib_ms", sa.BigInteger(), nullable=False),
        sa.Column("compute", sa.BigInteger(), nullable=False),
        sa.Column("floor", sa.BigInteger(), nullable=False),
        sa.Column("price", sa.BigInteger(), nullable=False),
        sa.Column("total", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_tool_calls_org_state", "tool_calls", ["org_id", "state"], unique=False)
    op.create_index("ix_tool_calls_node_state", "tool_calls", ["node_id", "state"], unique=False)
    op.create_index("ix_tool_calls_org_started", "tool_calls", ["org_id", "started_at"], unique=False)
    op.create_index("ix_tool_calls_key_started", "tool_calls", ["key_id", "started_at"], unique=False)
    op.create_table(
        "meter_events",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("call_id", sa.String(length=40), nullable=False),
        sa.Column("org_id", sa.String(length=40), nullable=False),
        sa.Column("key_id", sa.String(length=40), nullable=False),
        sa.Column("unit", sa.String(length=60), nullable=False),
        sa.Column("quantity", sa.BigInteger(), nullable=False),
        sa.Column("at", _timestamp(), nullable=False),
        sa.Column("publisher", sa.String(length=200), nullable=False),
        sa.Column("pack", sa.String(length=300), nullable=False),
        sa.Column("action", sa.String(length=200), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_meter_events_call_id", "meter_events", ["call_id"], unique=False)
    op.create_index("ix_meter_events_org_at", "meter_events", ["org_id", "at"], unique=False)
    op.create_index(
        "ix_meter_events_publisher_unit_at", "meter_events", ["publisher", "unit", "at"], unique=False
    )
    op.create_table(
        "idempotency_records",
        sa.Column("org_id", sa.String(length=40), nullable=False),
        sa.Column("key", sa.String(length=255), nullable=False),
        sa.Column("request_hash", sa.String(length=80), nullable=False),
        sa.Column("state", sa.String(length=20), nullable=False),
        sa.Column("claimed_until", _timestamp(), nullable=False),
        sa.Column("created_at", _timestamp(), nullable=False),
        sa.Column("expires_at", _timestamp(), nullable=False),
        sa.Column("call_id", sa.String(length=40), nullable=True),
        sa.Column("status", sa.Integer(), nullable=True),
        sa.Column("body", sa.JSON(), nullable=True),
        sa.PrimaryKeyConstraint("org_id", "key"),
    )
    op.create_index("ix_idempotency_records_expires_at", "idempotency_records", ["expires_at"], unique=False)


def _routines() -> None:
    """Old migration 3: routines, routine_runs."""
    op.create_table(
        "routines",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("org_id", sa.String(length=40), nullable=False),
        sa.Column("name", sa.String(length=63), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("description", sa.String(), nullable=False),
        sa.Column("source", sa.String(), nullable=False),
        sa.Column("routine", sa.JSON(), nullable=False),
        sa.Column("created_at", _timestamp(), nullable=False),
        sa.Column("updated_at", _timestamp(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("org_id", "name", name="uq_routines_org_name"),
    )
    op.create_index("ix_routines_org_id", "routines", ["org_id"], unique=False)
    op.create_table(
        "routine_runs",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("org_id", sa.String(length=40), nullable=False),
        sa.Column("key_id", sa.String(length=40), nullable=False),
        sa.Column("routine_name", sa.String(length=63), nullable=False),
        sa.Column("routine_version", sa.Integer(), nullable=False),
        sa.Column("workflow_id", sa.String(length=200), nullable=False),
        sa.Column("idempotency_key", sa.String(length=255), nullable=True),
        sa.Column("request_hash", sa.String(length=80), nullable=False),
        sa.Column("inputs", sa.JSON(), nullable=False),
        sa.Column("status", sa.String(length=20), nullable=False),
        sa.Column("result", sa.JSON(), nullable=True),
        sa.Column("error", sa.JSON(), nullable=True),
        sa.Column("created_at", _timestamp(), nullable=False),
        sa.Column("finished_at", _timestamp(), nullable=True),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("org_id", "idempotency_key", name="uq_routine_runs_org_key"),
    )
    op.create_index("ix_routine_runs_org_created", "routine_runs", ["org_id", "created_at"], unique=False)


def _call_cancels() -> None:
    """Old migration 4: call_cancels."""
    op.create_table(
        "call_cancels",
        sa.Column("call_id", sa.String(length=40), nullable=False),
        sa.Column("org_id", sa.String(length=40), nullable=False),
        sa.Column("key_id", sa.String(length=40), nullable=False),
        sa.Column("requested_at", _timestamp(), nullable=False),
        sa.Column("node_state", sa.String(length=20), nullable=False),
        sa.PrimaryKeyConstraint("call_id"),
    )


def _connections() -> None:
    """Old migration 5: connections."""
    op.create_table(
        "connections",
        sa.Column("pack", sa.String(length=300), nullable=False),
        sa.Column("connection", sa.String(length=200), nullable=False),
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("org_id", sa.String(length=40), nullable=False),
        sa.Column("kind", sa.String(length=20), nullable=False),
        sa.Column("params", sa.JSON(), nullable=False),
        sa.Column("hint", sa.String(length=4), nullable=False),
        sa.Column("sealed", sa.Text(), nullable=False),
        sa.Column("created_at", _timestamp(), nullable=False),
        sa.Column("updated_at", _timestamp(), nullable=False),
        sa.ForeignKeyConstraint(["org_id"], ["organizations.id"]),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("org_id", "pack", "connection", name="uq_connections_org_pack_connection"),
    )
    op.create_index("ix_connections_org_id", "connections", ["org_id"], unique=False)


# The old migrations 1..5, in order: the old `schema_version` N means groups 1..N exist.
GROUPS: tuple[Callable[[], None], ...] = (
    _accounts_and_registry,
    _calls,
    _routines,
    _call_cancels,
    _connections,
)

# Every table, children before parents (for downgrade).
_DROP_ORDER = (
    "connections",
    "call_cancels",
    "routine_runs",
    "routines",
    "idempotency_records",
    "meter_events",
    "tool_calls",
    "nodes",
    "pack_versions",
    "packs",
    "blob_uploads",
    "signing_keys",
    "publishers",
    "api_keys",
    "organizations",
)


def upgrade() -> None:
    """Create every table (only the groups an old database lacks)."""
    config = op.get_context().config
    done = int(config.attributes.get("legacy_schema_version", 0)) if config is not None else 0
    for create in GROUPS[done:]:
        create()


def downgrade() -> None:
    """Drop every table (and its rows)."""
    for name in _DROP_ORDER:
        op.drop_table(name)

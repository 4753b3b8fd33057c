"""Routine versions, re-runs and schedules (issue 13, items 3 to 5).

Adds `routine_versions` (every stored version of a routine, by the sha256 of its YAML; each routine
stored before this revision gets its current version there), `routine_schedules` (the schedules of a
routine and the hash of each one's grant), and to `routine_runs` the routine version a run ran
(`routine_hash`), its pins, the run it re-ran (`rerun_of`) and the schedule that started it
(`schedule_id`); runs stored before this revision have them empty.

Frozen: every definition is written out here, never read from the models.

Revision ID: 0004_routine_versions
Revises: 0003_run_grants
Create Date: 2026-11-30
"""

from __future__ import annotations

import hashlib

import sqlalchemy as sa
from alembic import op

revision: str = "0004_routine_versions"
down_revision: str | None = "0003_run_grants"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    versions = op.create_table(
        "routine_versions",
        sa.Column("org_id", sa.String(length=40), nullable=False),
        sa.Column("name", sa.String(length=63), nullable=False),
        sa.Column("hash", sa.String(length=80), nullable=False),
        sa.Column("source", sa.String(), nullable=False),
        sa.Column("routine", sa.JSON(), nullable=False),
        sa.Column("stored_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("org_id", "name", "hash"),
    )
    op.create_table(
        "routine_schedules",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("org_id", sa.String(length=40), nullable=False),
        sa.Column("routine_name", sa.String(length=63), nullable=False),
        sa.Column("key_id", sa.String(length=40), nullable=False),
        sa.Column("cron", sa.String(length=200), nullable=False),
        sa.Column("timezone", sa.String(length=64), nullable=False),
        sa.Column("inputs", sa.JSON(), nullable=False),
        sa.Column("overlap", sa.String(length=20), nullable=False),
        sa.Column("declared", sa.Boolean(), nullable=False),
        sa.Column("paused", sa.Boolean(), nullable=False),
        sa.Column("grant_hash", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index(
        "ix_routine_schedules_org_routine", "routine_schedules", ["org_id", "routine_name"], unique=False
    )
    op.add_column("routine_runs", sa.Column("routine_hash", sa.String(length=80), nullable=True))
    op.add_column("routine_runs", sa.Column("pins", sa.JSON(), nullable=True))
    op.add_column("routine_runs", sa.Column("rerun_of", sa.String(length=40), nullable=True))
    op.add_column("routine_runs", sa.Column("schedule_id", sa.String(length=40), nullable=True))
    # each routine's current version becomes its first kept version
    routines = sa.table(
        "routines",
        sa.column("org_id", sa.String),
        sa.column("name", sa.String),
        sa.column("source", sa.String),
        sa.column("routine", sa.JSON),
        sa.column("updated_at", sa.DateTime(timezone=True)),
    )
    rows = op.get_bind().execute(sa.select(routines)).mappings().all()
    if rows:
        op.bulk_insert(
            versions,
            [
                {
                    "org_id": r["org_id"],
                    "name": r["name"],
                    "hash": "sha256:" + hashlib.sha256(r["source"].encode()).hexdigest(),
                    "source": r["source"],
                    "routine": r["routine"],
                    "stored_at": r["updated_at"],
                }
                for r in rows
            ],
        )


def downgrade() -> None:
    with op.batch_alter_table("routine_runs") as batch:
        for column in ("schedule_id", "rerun_of", "pins", "routine_hash"):
            batch.drop_column(column)
    op.drop_index("ix_routine_schedules_org_routine", table_name="routine_schedules")
    op.drop_table("routine_schedules")
    op.drop_table("routine_versions")

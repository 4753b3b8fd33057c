"""`routine_schedules.temporal_id`: the id of a schedule's Temporal Schedule, which names its routine.

A schedule made from this revision on has its Temporal Schedule at `routine-schedule-<routine>-<id>`, so
that the Temporal UI's Schedules list, which shows a schedule by its id, names the routine. Rows stored
before keep NULL: their Temporal Schedules stay at `routine-schedule-<id>` (Temporal cannot rename a
schedule, and they keep running as they are). The downgrade drops the column: the schedules made since
then are then looked up at the old id, where there is none, so delete and make them again first.

Frozen: every definition is written out here, never read from the models.

Revision ID: 0012_schedule_temporal_id
Revises: 0011_connection_hosts
Create Date: 2026-12-04
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0012_schedule_temporal_id"
down_revision: str | None = "0011_connection_hosts"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    op.add_column("routine_schedules", sa.Column("temporal_id", sa.String(length=200), nullable=True))


def downgrade() -> None:
    op.drop_column("routine_schedules", "temporal_id")

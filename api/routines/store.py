"""The routine store: routines checked and stored, every version kept, and the versions runs start from.

Storing a routine checks its YAML in a checker process (api.checker: every `uses:` must resolve in this
api's registry, literal `with:` values must fit the action's inputSchema), then replaces the
organization's routine of that name and keeps the YAML as a version (`routine_versions`, by the sha256
of the YAML). Versions are never changed nor deleted, so a process keeps what it read of them: which
versions are stored (`VERSIONS_KEPT`), and each version's validated routine (`ROUTINES_KEPT_BYTES`
of YAML), the least recently used going first.

Database work is synchronous here: the services call it in a worker thread (api.db.in_thread).
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable
from typing import Any

from cachetools import LRUCache
from sqlalchemy import Engine, bindparam
from sqlmodel import Session, col, select

from api.accounts.organizations import new_id
from api.checker import Checkers
from api.db import in_thread, read_session
from api.errors import NotFound
from api.models import utcnow
from api.rawsql import Reads
from api.routines.models import RoutineVersionPublic
from api.routines.tables import RoutineRecord, RoutineVersion
from engine.routine import Routine

VERSIONS_KEPT = 4096
"""The stored routine versions a process remembers as stored (a version stored is never removed)."""
ROUTINES_KEPT_BYTES = 32 * 1024 * 1024
"""How much routine YAML (by size) a process keeps validated in memory for run starts."""

VersionKey = tuple[str, str, str]
"""(organization, routine name, version hash)."""

_CURRENT_SOURCE = select(RoutineRecord.version, RoutineRecord.source).where(
    col(RoutineRecord.org_id) == bindparam("org_id"), col(RoutineRecord.name) == bindparam("name")
)  # built once, run on the driver (api.rawsql): every run start reads it


def routine_hash(source: str) -> str:
    """A routine version's id: `sha256:<hex>` of its YAML as sent."""
    return "sha256:" + hashlib.sha256(source.encode()).hexdigest()


def no_routine(name: str) -> NotFound:
    """The error of a routine name the organization does not have."""
    return NotFound(f"Your organization has no routine named {name[:100]!r}.", field="name")


class RoutineStore:
    """Routines and their versions of every organization, over one database engine."""

    def __init__(self, engine: Engine, checkers: Checkers) -> None:
        self._engine = engine
        self._checkers = checkers
        self._lock = threading.Lock()  # the caches are used from worker threads
        self._stored: LRUCache[VersionKey, bool] = LRUCache(maxsize=VERSIONS_KEPT)
        self._routines: LRUCache[VersionKey, tuple[Routine, int]] = LRUCache(
            maxsize=ROUTINES_KEPT_BYTES, getsizeof=lambda kept: kept[1]
        )

    @property
    def engine(self) -> Engine:
        """The database engine routines are stored in."""
        return self._engine

    async def store_routine(
        self, *, org_id: str, source: str, check: Callable[[Routine], None] | None = None
    ) -> RoutineRecord:
        """Validate a routine's YAML and store it, replacing the organization's routine of that name.

        The YAML is read and checked in a checker process (`api.checker`): every `uses:` must
        resolve in this api's registry, and literal `with:` values must fit the action's inputSchema
        (`api.routines.resolver.DbResolver`). `check` may refuse the valid routine before anything is
        written.

        Raises:
            InvalidRequest: the YAML has problems (each `line:column: message` in `problems`), or could not
                be read within the time or memory a routine may take.
            ServiceUnavailable: no checker could start.
        """
        data = await self._checkers.routine(org_id, source)
        return await in_thread(self._store_checked, org_id, source, data, check)

    def _store_checked(
        self, org_id: str, source: str, data: dict[str, Any], check: Callable[[Routine], None] | None
    ) -> RoutineRecord:
        """Store a routine its checker has read (`data`: the routine as stored)."""
        routine = Routine.model_validate(data)
        if check is not None:
            check(routine)
        with Session(self._engine) as session:
            row = session.exec(
                select(RoutineRecord).where(
                    RoutineRecord.org_id == org_id, RoutineRecord.name == routine.name
                )
            ).first()
            if row is None:
                row = RoutineRecord(
                    id=new_id("rtn"),
                    org_id=org_id,
                    name=routine.name,
                    source=source,
                    routine=data,
                    description=routine.description,
                )
            else:
                row.version, row.source, row.routine = row.version + 1, source, data
                row.description, row.updated_at = routine.description, utcnow()
            session.add(row)
            _keep_version(session, org_id=org_id, name=routine.name, source=source, routine=data)
            session.commit()
            session.refresh(row)
            return row

    def get_routine(self, *, org_id: str, name: str) -> RoutineRecord:
        """The organization's routine of this name, or NotFound."""
        with read_session(self._engine) as session:
            row = session.exec(
                select(RoutineRecord).where(RoutineRecord.org_id == org_id, RoutineRecord.name == name)
            ).first()
        if row is None:
            raise no_routine(name)
        return row

    def list_routines(self, *, org_id: str) -> list[RoutineRecord]:
        """The organization's routines by name."""
        with read_session(self._engine) as session:
            query = (
                select(RoutineRecord).where(RoutineRecord.org_id == org_id).order_by(col(RoutineRecord.name))
            )
            return list(session.exec(query).all())

    def list_versions(self, *, org_id: str, name: str) -> list[RoutineVersionPublic]:
        """Every version of the organization's routine, newest first (NotFound: no such routine)."""
        current = routine_hash(self.get_routine(org_id=org_id, name=name).source)
        with read_session(self._engine) as session:
            rows = session.exec(
                select(RoutineVersion)
                .where(RoutineVersion.org_id == org_id, RoutineVersion.name == name)
                .order_by(col(RoutineVersion.stored_at).desc())
            ).all()
        return [
            RoutineVersionPublic(
                hash=r.hash,
                stored_at=r.stored_at,
                yaml_bytes=len(r.source.encode()),
                current=r.hash == current,
            )
            for r in rows
        ]

    # --- the versions runs start from ----------------------------------------------------------

    def current_version(self, *, org_id: str, name: str) -> tuple[int, str]:
        """The routine's current version: its number and hash (NotFound: no such routine).

        Reads the YAML's hash, not the stored routine's JSON; a version this process knows is stored costs
        no further query, another is kept in `routine_versions` if it was not yet (a routine stored before
        versions were kept).
        """
        with Reads(self._engine) as reads:
            found = reads.run(_CURRENT_SOURCE, {"org_id": org_id, "name": name}).first()
        if found is None:
            raise no_routine(name)
        number, source = found
        version = routine_hash(source)
        key = (org_id, name, version)
        with self._lock:
            if key in self._stored:
                return number, version
        record = self.get_routine(org_id=org_id, name=name)
        version = routine_hash(record.source)
        key = (org_id, name, version)
        with read_session(self._engine) as session:
            stored = session.get(RoutineVersion, key) is not None
        if not stored:
            with Session(self._engine) as session:
                _keep_version(session, org_id=org_id, name=name, source=record.source, routine=record.routine)
                session.commit()
        with self._lock:
            self._stored[key] = True
        return record.version, version

    def routine_of_version(self, *, org_id: str, name: str, version: str) -> Routine:
        """A version's validated routine (read and validated once per process: versions never change).

        Raises:
            NotFound: no such routine version.
        """
        key = (org_id, name, version)
        with self._lock:
            kept = self._routines.get(key)
        if kept is not None:
            return kept[0]
        with read_session(self._engine) as session:
            row = session.get(RoutineVersion, key)
        if row is None:
            raise no_routine(name)
        routine = Routine.model_validate(row.routine)
        size = len(row.source)
        if size <= ROUTINES_KEPT_BYTES:
            with self._lock:
                self._routines[key] = (routine, size)
        return routine

    def version_ran(
        self, *, org_id: str, name: str, version: str | None, number: int
    ) -> tuple[str, dict[str, Any]] | None:
        """The version a run ran and that version's routine as stored, or None when it is gone.

        Args:
            version: The version's hash as the run recorded it; None for a run from before versions were
                kept: its version is then the current one, if the routine was not stored again since.
            number: The routine's version number the run ran.
        """
        with read_session(self._engine) as session:
            if version is not None:
                kept = session.get(RoutineVersion, (org_id, name, version))
                if kept is not None:
                    return kept.hash, kept.routine
                return None
            record = session.exec(
                select(RoutineRecord).where(RoutineRecord.org_id == org_id, RoutineRecord.name == name)
            ).first()
            if record is not None and record.version == number:
                return routine_hash(record.source), record.routine
        return None


def _keep_version(session: Session, *, org_id: str, name: str, source: str, routine: dict[str, Any]) -> str:
    """Add this YAML to the routine's versions unless it is there already (the caller commits)."""
    version = routine_hash(source)
    if session.get(RoutineVersion, (org_id, name, version)) is None:
        session.add(RoutineVersion(org_id=org_id, name=name, hash=version, source=source, routine=routine))
    return version

"""Bring the database's schema to the newest revision; prints the revision before and after.

Talks to the database named by B3OS_DATABASE_URL / DATABASE_URL (default SQLite under .b3os/). The
api applies pending revisions itself when it starts; this command does it ahead of a deploy. Of
several starters at once, one migrates and the others wait for it (a lock). A database made before
the migrations moved to alembic is adopted (docs/api.md, Settings).
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sqlalchemy import Engine


def add_arguments(parser: argparse.ArgumentParser) -> None:
    del parser  # no options: the database comes from the environment, as for the api


def describe(engine: Engine) -> str:
    """Where the database's schema is: a revision, an old `schema_version`, or empty."""
    from api.migrations import current_revision, legacy_version

    revision = current_revision(engine)
    if revision is not None:
        return revision
    legacy = legacy_version(engine)
    if legacy is not None:
        return f"schema_version {legacy} (made before alembic)"
    return "none (no schema yet)"


def run(args: argparse.Namespace) -> int:
    from api.config import Settings
    from api.db import engine_from_settings
    from api.migrations import MigrationError, migrate

    engine = engine_from_settings(Settings())
    try:
        before = describe(engine)
        after = migrate(engine)
    except MigrationError as exc:
        print(f"b3os admin migrate: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:  # a database that cannot be reached, a bad URL
        print(
            f"b3os admin migrate: the database could not be migrated: {exc.__class__.__name__}: {exc}",
            file=sys.stderr,
        )
        return 1
    finally:
        engine.dispose()
    print(f"before: {before}")
    print(f"after: {after} (head)")
    return 0

"""Issue, list and revoke nodes' own credentials (each bound to one node id; the secret is printed once).

Works on the database named by B3OS_DATABASE_URL / DATABASE_URL (default SQLite under .b3os/), applying
pending migrations first, like `b3os admin init`. Give the printed B3OS_NODE_ID and B3OS_NODE_CREDENTIAL
to that node alone. Issuing again for a node id replaces its credential; a revoked node's heartbeats and
registry reads are refused (401) and it is offered no more calls.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any


def add_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", metavar="ACTION")
    actions.required = True
    issue = actions.add_parser("issue", help="issue NODE_ID a credential (replacing any); printed once")
    issue.add_argument("node_id", metavar="NODE_ID", help="the node's id, e.g. node-a (B3OS_NODE_ID there)")
    actions.add_parser("list", help="list the node credentials (never their secrets)")
    revoke = actions.add_parser("revoke", help="revoke NODE_ID's credential")
    revoke.add_argument("node_id", metavar="NODE_ID")


def _with_session(work: Callable[[Any], Any]) -> Any:
    """`work(session)` on the installation's database, migrated first, committed after.

    Raises:
        ValueError: the work refused (an ApiError, such as a bad node id); the sentence says why.
    """
    from sqlmodel import Session

    from api.config import Settings
    from api.db import engine_from_settings
    from api.errors import ApiError
    from api.migrations import migrate

    engine = engine_from_settings(Settings())
    try:
        migrate(engine)
        with Session(engine, expire_on_commit=False) as session:
            try:
                result = work(session)
            except ApiError as exc:
                raise ValueError(exc.message) from exc
            session.commit()
            return result
    finally:
        engine.dispose()


def run(args: argparse.Namespace) -> int:
    from api.accounts import node_credentials

    try:
        if args.action == "issue":
            _, secret = _with_session(lambda s: node_credentials.issue_credential(s, node_id=args.node_id))
            print(f"node credential issued for {args.node_id} (any earlier one no longer works)")
            print("It is shown once; give these to that node alone:")
            print(f"B3OS_NODE_ID={args.node_id}")
            print(f"B3OS_NODE_CREDENTIAL={secret}")
        elif args.action == "list":
            rows = _with_session(node_credentials.list_credentials)
            for row in rows:
                state = f"revoked {row.revoked_at:%Y-%m-%d %H:%M:%S}Z" if row.revoked_at else "active"
                print(f"{row.node_id}  {row.prefix}...  issued {row.created_at:%Y-%m-%d %H:%M:%S}Z  {state}")
            if not rows:
                print("no node credentials: issue one with b3os node credential issue NODE_ID")
        else:
            row = _with_session(lambda s: node_credentials.revoke_credential(s, node_id=args.node_id))
            if row is None:
                print(f"b3os node credential revoke: node {args.node_id} has no credential", file=sys.stderr)
                return 1
            print(f"revoked the credential of node {args.node_id}: it is offered no more calls")
    except ValueError as exc:
        print(f"b3os node credential {args.action}: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:  # a database that cannot be reached, a bad URL
        print(
            f"b3os node credential {args.action}: the database could not be used: "
            f"{exc.__class__.__name__}: {exc}",
            file=sys.stderr,
        )
        return 1
    return 0

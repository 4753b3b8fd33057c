"""Create the installation's first organization and its owner key (the key is printed once).

Talks to the database named by B3OS_DATABASE_URL / DATABASE_URL (default SQLite under .b3os/),
applying pending migrations first. The first organization is the operator: its keys edit the
publisher list (`b3os publisher add`). --publisher gives it namespaces at once;
--additional makes a further, non-operator organization.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass


@dataclass(frozen=True)
class Initialized:
    """What init made: the organization, its owner key id and the secret (shown once)."""

    org_id: str
    is_operator: bool
    key_id: str
    scopes: list[str]
    secret: str


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--org", default="Default organization", help="the organization's name")
    parser.add_argument(
        "--publisher",
        action="append",
        default=[],
        metavar="NAMESPACE",
        help="give this namespace to the organization (repeatable), e.g. com.example.tools",
    )
    parser.add_argument("--key-name", default="owner", help="the owner key's name")
    parser.add_argument(
        "--additional",
        action="store_true",
        help="create a further organization (not the operator) in an initialized installation",
    )


def initialize(
    *,
    org_name: str,
    namespaces: list[str],
    key_name: str = "owner",
    additional: bool = False,
    settings: object | None = None,
) -> Initialized:
    """Create an organization with an owner key and namespaces.

    Raises:
        ValueError: the installation is already initialized (without `additional`), or a namespace is bad.
    """
    from sqlmodel import Session, select

    from api.accounts import organizations
    from api.accounts.scopes import OWNER_SCOPES
    from api.config import Settings
    from api.db import engine_from_settings
    from api.errors import ApiError
    from api.migrations import migrate
    from api.models import Organization
    from api.registry import publishers

    resolved = settings if isinstance(settings, Settings) else Settings()
    engine = engine_from_settings(resolved)
    try:
        migrate(engine)
        with Session(engine) as session:
            operator = session.exec(select(Organization).where(Organization.is_operator == True)).first()  # noqa: E712
            if operator is not None and not additional:
                raise ValueError(
                    f"This installation is already initialized (operator organization {operator.id}); "
                    "make keys with POST /v1/keys, or another organization with --additional."
                )
            org = organizations.create_organization(session, name=org_name, is_operator=operator is None)
            key, secret = organizations.create_api_key(
                session, org_id=org.id, scopes=OWNER_SCOPES, name=key_name
            )
            try:
                for namespace in namespaces:
                    publishers.set_publisher(session, namespace=namespace, org_id=org.id)
            except ApiError as exc:
                raise ValueError(exc.message) from exc
            session.commit()
            return Initialized(org.id, org.is_operator, key.id, list(key.scopes), secret)
    finally:
        engine.dispose()


def run(args: argparse.Namespace) -> int:
    try:
        made = initialize(
            org_name=args.org, namespaces=args.publisher, key_name=args.key_name, additional=args.additional
        )
    except ValueError as exc:
        print(f"b3os admin init: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:  # a database that cannot be reached, a bad URL
        print(
            f"b3os admin init: the database could not be initialized: {exc.__class__.__name__}: {exc}",
            file=sys.stderr,
        )
        return 1
    role = " (operator)" if made.is_operator else ""
    print(f"organization {made.org_id}{role}")
    for namespace in args.publisher:
        print(f"publisher {namespace}")
    print(f"key {made.key_id} with scopes {', '.join(made.scopes)}")
    print("This key is shown once; keep it now:")
    print(f"B3OS_API_KEY={made.secret}")
    return 0

"""Fixtures of the api tests: an app on a fresh migrated database (SQLite and PostgreSQL), orgs and keys."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest
from apitest import Org
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlmodel import Session

from api.accounts import node_credentials, organizations
from api.accounts.scopes import OWNER_SCOPES
from api.config import Settings
from api.main import create_app
from api.registry import publishers


@pytest.fixture
def settings(migrated_database_url: str, tmp_path: Path) -> Settings:
    return Settings(data_dir=tmp_path / "state", database_url=migrated_database_url)


@pytest.fixture
def app(settings: Settings) -> Iterator[FastAPI]:
    app = create_app(settings)
    yield app
    app.state.engine.dispose()


@pytest.fixture
def client(app: FastAPI) -> Iterator[TestClient]:
    with TestClient(app) as client:
        yield client


@pytest.fixture
def make_org(app: FastAPI) -> Callable[..., Org]:
    """Make an organization with one key: `make_org(scopes=[...], namespaces=[...], operator=False)`."""

    def make(
        *,
        scopes: Sequence[str] = OWNER_SCOPES,
        namespaces: Sequence[str] = (),
        operator: bool = False,
        name: str = "test org",
    ) -> Org:
        with Session(app.state.engine) as session:
            org = organizations.create_organization(session, name=name, is_operator=operator)
            key, secret = organizations.create_api_key(session, org_id=org.id, scopes=scopes, name="test")
            for namespace in namespaces:
                publishers.set_publisher(session, namespace=namespace, org_id=org.id)
            session.commit()
            return Org(org_id=org.id, key_id=key.id, key=secret)

    return make


@pytest.fixture
def add_key(app: FastAPI) -> Callable[..., Org]:
    """Add a key with the given scopes to an existing organization: `add_key(org, scopes)`."""

    def add(org: Org, scopes: Sequence[str]) -> Org:
        with Session(app.state.engine) as session:
            key, secret = organizations.create_api_key(session, org_id=org.org_id, scopes=scopes)
            session.commit()
            return Org(org_id=org.org_id, key_id=key.id, key=secret)

    return add


@pytest.fixture
def issue_node(app: FastAPI) -> Callable[[str], dict[str, str]]:
    """Issue a node its credential: `issue_node("n1")` is the headers that node sends."""

    def issue(node_id: str) -> dict[str, str]:
        with Session(app.state.engine) as session:
            _, secret = node_credentials.issue_credential(session, node_id=node_id)
            session.commit()
        return {"Authorization": f"Bearer {secret}"}

    return issue


@pytest.fixture
def node_headers(issue_node: Callable[[str], dict[str, str]]) -> dict[str, str]:
    """The headers of a node `node-test` with its own credential."""
    return issue_node("node-test")

"""Connections of the caller's organization: add (sealed to the egress proxy), list, remove."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Response

from api.accounts.scopes import CONNECTIONS_READ, CONNECTIONS_WRITE
from api.connections import service
from api.connections.tables import ConnectionCreate, ConnectionList, ConnectionListed, ConnectionPublic
from api.deps import Principal, ReadSessionDep, SessionDep, SettingsDep, require
from api.errors import NotFound, error_responses

router = APIRouter(prefix="/v1/connections", tags=["connections"])
Writer = Annotated[Principal, Depends(require(CONNECTIONS_WRITE))]
Reader = Annotated[Principal, Depends(require(CONNECTIONS_READ))]


@router.post(
    "", status_code=201, response_model=ConnectionPublic, responses=error_responses(400, 403, 404, 413, 503)
)
def add_connection(
    body: ConnectionCreate, principal: Writer, session: SessionDep, settings: SettingsDep
) -> ConnectionPublic:
    """Add a credential for a pack's connection (or replace it), sealed so only the egress proxy reads it."""
    row = service.add_connection(
        session,
        settings=settings,
        org_id=principal.org_id,
        pack=body.pack,
        connection=body.connection,
        params=body.params,
        secret=body.secret,
    )
    return ConnectionPublic.model_validate(row.model_dump(exclude={"sealed"}))


@router.get("", response_model=ConnectionList, responses=error_responses(403))
def list_connections(principal: Reader, session: ReadSessionDep) -> ConnectionList:
    """The caller's organization's connections, by pack then connection (never their secrets)."""
    rows = service.list_connections(session, org_id=principal.org_id)
    items = [ConnectionListed.model_validate(r.model_dump(exclude={"sealed"})) for r in rows]
    return ConnectionList(items=items)


@router.delete(
    "/{connection_id}", status_code=204, response_class=Response, responses=error_responses(403, 404)
)
def remove_connection(connection_id: str, principal: Writer, session: SessionDep) -> Response:
    """Remove one of the caller's organization's connections; calls that need it fail from then on."""
    if not service.delete_connection(session, org_id=principal.org_id, connection_id=connection_id):
        raise NotFound(f"Your organization has no connection {connection_id[:100]}.", field="id")
    return Response(status_code=204)

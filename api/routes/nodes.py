"""The node seam: heartbeat (registration, free slots, installed versions) and the registry feed.

Both take a node's own credential; a heartbeat speaks only for the credential's node id (403 otherwise)
and names a URL the api may call (api.nodes.check_node_url; 400 otherwise).
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query
from pydantic import BaseModel

from api import nodes
from api.deps import NodeCaller, ReadSessionDep, SessionDep, SettingsDep, node_caller
from api.errors import Forbidden, error_responses
from api.jsonbody import MAX_SAFE_INTEGER
from api.models import NodeHeartbeat, NodePublic

router = APIRouter(prefix="/v1/nodes", tags=["nodes"])
NodeDep = Annotated[NodeCaller, Depends(node_caller)]


class RegistryFeed(BaseModel):
    versions: list[dict[str, Any]]
    cursor: int


@router.post(
    "/heartbeat",
    response_model=NodePublic,
    responses=error_responses(
        400, 403, 413, notes={403: "forbidden: the heartbeat names another node than its credential's"}
    ),
)
def heartbeat(body: NodeHeartbeat, caller: NodeDep, session: SessionDep, settings: SettingsDep) -> NodePublic:
    """Register a node, or refresh its URL, free slots and installed versions."""
    if body.node_id != caller.node_id:
        raise Forbidden(
            f"This credential is node {caller.node_id}'s; it cannot speak for node {body.node_id}.",
            field="node_id",
            value=body.node_id,
        )
    nodes.check_node_url(body.url, networks=settings.node_network_list())
    node = nodes.record_heartbeat(session, beat=body)
    return NodePublic.model_validate(node.model_dump())


@router.get("/registry", response_model=RegistryFeed, responses=error_responses(400))
def registry(
    _: NodeDep,
    session: ReadSessionDep,
    settings: SettingsDep,
    after: Annotated[int, Query(ge=0, le=MAX_SAFE_INTEGER)] = 0,
) -> RegistryFeed:
    """Published pack versions after the cursor, oldest first."""
    versions, cursor = nodes.registry_feed(session, after=after, limit=settings.registry_page_size)
    return RegistryFeed(versions=versions, cursor=cursor)

"""The node seam: heartbeat (registration, free slots, installed versions) and the registry feed."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query
from pydantic import BaseModel

from api import nodes
from api.deps import NodeCaller, SessionDep, SettingsDep, node_caller
from api.errors import error_responses
from api.jsonbody import MAX_SAFE_INTEGER
from api.models import NodeHeartbeat, NodePublic

router = APIRouter(prefix="/v1/nodes", tags=["nodes"])
NodeDep = Annotated[NodeCaller, Depends(node_caller)]


class RegistryFeed(BaseModel):
    versions: list[dict[str, Any]]
    cursor: int


@router.post("/heartbeat", response_model=NodePublic, responses=error_responses(400, 413))
def heartbeat(body: NodeHeartbeat, _: NodeDep, session: SessionDep) -> NodePublic:
    """Register a node, or refresh its URL, free slots and installed versions."""
    node = nodes.record_heartbeat(session, beat=body)
    return NodePublic.model_validate(node.model_dump())


@router.get("/registry", response_model=RegistryFeed, responses=error_responses(400))
def registry(
    _: NodeDep,
    session: SessionDep,
    settings: SettingsDep,
    after: Annotated[int, Query(ge=0, le=MAX_SAFE_INTEGER)] = 0,
) -> RegistryFeed:
    """Published pack versions after the cursor, oldest first."""
    versions, cursor = nodes.registry_feed(session, after=after, limit=settings.registry_page_size)
    return RegistryFeed(versions=versions, cursor=cursor)

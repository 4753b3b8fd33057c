"""Registry blobs: upload by sha256 (checked, at most 64 MiB), presence, download."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Path, Request, Response
from fastapi.responses import FileResponse, StreamingResponse
from pydantic import BaseModel
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session
from starlette.concurrency import run_in_threadpool

from api.accounts.scopes import ACTIONS_WRITE
from api.deps import NodeCaller, Principal, principal_or_node, require
from api.errors import NotFound, PayloadTooLarge, error_responses
from api.models import BlobUpload, PublishedBlob
from api.registry.blobs import DIGEST_PATTERN, BlobStore, parse_digest

router = APIRouter(prefix="/v1/actions/registry/blobs", tags=["registry"])
# Any publisher uploads bundle files; publishing a tool pack is what needs TOOLS_PUBLISH (routes/registry.py).
Uploader = Annotated[Principal, Depends(require(ACTIONS_WRITE))]


class BlobStored(BaseModel):
    digest: str
    bytes: int


async def blob_store(request: Request) -> BlobStore:
    """The app's blob store (a dependency)."""
    store: BlobStore = request.app.state.blobs
    return store


BlobsDep = Annotated[BlobStore, Depends(blob_store)]
Digest = Annotated[
    str,
    Path(
        description="sha256:<64 lowercase hex>, the bytes' name",
        json_schema_extra={"pattern": DIGEST_PATTERN.pattern},
    ),
]


def _uploaded(request: Request, org_id: str, hexdigest: str) -> bool:
    with Session(request.app.state.engine) as session:
        return session.get(BlobUpload, (hexdigest, org_id)) is not None


def _record(request: Request, org_id: str, hexdigest: str, size: int) -> bool:
    with Session(request.app.state.engine) as session:
        if session.get(BlobUpload, (hexdigest, org_id)) is not None:
            return False
        session.add(BlobUpload(sha256=hexdigest, org_id=org_id, bytes=size))
        try:
            session.commit()
        except IntegrityError:  # the same upload ran concurrently and recorded it first
            return False
        return True


@router.put(
    "/{digest}",
    response_model=BlobStored,
    status_code=201,
    responses={
        200: {"model": BlobStored, "description": "your organization had these bytes already"},
        **error_responses(400, 403, 413),
    },
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}},
        }
    },
)
async def put_blob(
    digest: Digest, request: Request, response: Response, principal: Uploader, blobs: BlobsDep
) -> BlobStored:
    """Store bytes whose sha256 is the name (idempotent; 201 when new to your organization)."""
    hexdigest = parse_digest(digest)
    limit = request.app.state.settings.max_blob_bytes
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise PayloadTooLarge(f"The blob is larger than the limit of {limit} bytes.", limit_bytes=limit)
    size = await blobs.write(request.stream(), hexdigest=hexdigest, max_bytes=limit)
    if not await run_in_threadpool(_record, request, principal.org_id, hexdigest, size):
        response.status_code = 200
    return BlobStored(digest=f"sha256:{hexdigest}", bytes=size)


def _published(request: Request, hexdigest: str) -> bool:
    with Session(request.app.state.engine) as session:
        return session.get(PublishedBlob, hexdigest) is not None


def _readable(request: Request, caller: Principal | NodeCaller, blobs: BlobStore, digest: str) -> str:
    """An organization reads the blobs it uploaded, a node those of published pack versions."""
    hexdigest = parse_digest(digest)
    present = blobs.size(hexdigest) is not None
    if present and isinstance(caller, Principal):
        present = _uploaded(request, caller.org_id, hexdigest)
    elif present:
        present = _published(request, hexdigest)
    if not present:
        raise NotFound(f"There is no blob {digest}.", field="digest")
    return hexdigest


@router.head("/{digest}", status_code=200, responses=error_responses(400, 404))
def head_blob(
    digest: Digest,
    request: Request,
    caller: Annotated[Principal | NodeCaller, Depends(principal_or_node)],
    blobs: BlobsDep,
) -> Response:
    """Whether the blob is there (for your organization): 200 with its size, or 404."""
    hexdigest = _readable(request, caller, blobs, digest)
    return Response(
        headers={"Content-Length": str(blobs.size(hexdigest) or 0)}, media_type="application/octet-stream"
    )


@router.get(
    "/{digest}",
    response_class=StreamingResponse,
    responses={
        200: {"content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}}},
        **error_responses(400, 404),
    },
)
def get_blob(
    digest: Digest,
    request: Request,
    caller: Annotated[Principal | NodeCaller, Depends(principal_or_node)],
    blobs: BlobsDep,
) -> Response:
    """The blob's bytes (for nodes, and for the organization that uploaded it)."""
    hexdigest = _readable(request, caller, blobs, digest)
    path = blobs.local_path(hexdigest)
    if path is not None:
        return FileResponse(path, media_type="application/octet-stream")
    return StreamingResponse(  # a sync iterator: Starlette reads each slice in a worker thread
        blobs.chunks(hexdigest),
        media_type="application/octet-stream",
        headers={"Content-Length": str(blobs.size(hexdigest) or 0)},
    )

"""Liveness: answers when the api is up and its database answers."""

from __future__ import annotations

from fastapi import APIRouter
from pydantic import BaseModel
from sqlalchemy import text

from api.deps import SessionDep

router = APIRouter(tags=["health"])


class Health(BaseModel):
    ok: bool


@router.get("/healthz", response_model=Health)
def healthz(session: SessionDep) -> Health:
    """The api is up and its database answers."""
    session.exec(text("SELECT 1"))  # type: ignore[call-overload]
    return Health(ok=True)

"""The pack registry: publish a signed version, read packs, versions, manifests and MCP tools."""

from __future__ import annotations

from fastapi import APIRouter

router = APIRouter(prefix="/v1/actions/packs", tags=["registry"])

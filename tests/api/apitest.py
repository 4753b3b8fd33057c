"""Helpers of the api tests (fixtures are in conftest.py)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Org:
    """An organization of a test and one key of it."""

    org_id: str
    key_id: str
    key: str

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}"}

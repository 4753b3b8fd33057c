"""API keys of the caller's organization: create (secret shown once), list, revoke."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends
from pydantic import BaseModel

from api.accounts import organizations
from api.accounts.scopes import KEYS_ADMIN, covers
from api.deps import Principal, ReadSessionDep, SessionDep, SettingsDep, require
from api.errors import Forbidden, NotFound, error_responses
from api.models import ApiKey, ApiKeyCreate, ApiKeyCreated, ApiKeyPublic

router = APIRouter(prefix="/v1/keys", tags=["keys"])
Admin = Annotated[Principal, Depends(require(KEYS_ADMIN))]


class ApiKeyList(BaseModel):
    keys: list[ApiKeyPublic]


@router.post("", status_code=201, response_model=ApiKeyCreated, responses=error_responses(400, 403, 413, 429))
def create_key(
    body: ApiKeyCreate, principal: Admin, session: SessionDep, settings: SettingsDep
) -> ApiKeyCreated:
    """Create a key in the caller's organization; the secret is in this answer only."""
    organizations.check_key_creations(session, org_id=principal.org_id, per_hour=settings.keys_per_hour)
    for scope in body.scopes:
        if not covers(principal.scopes, scope):
            raise Forbidden(
                f"A key cannot hand out the scope {scope}, which it does not hold itself.", field="scopes"
            )
    own = session.get(ApiKey, principal.key_id)
    cap, asked = (own.monthly_spend_cap_microusd if own else None), body.monthly_spend_cap_microusd
    if cap is not None and (asked is None or asked > cap):
        raise Forbidden(
            f"A key with a monthly spend cap of {cap} micro-USD cannot create a key with "
            + ("no cap" if asked is None else f"a cap of {asked}")
            + f": give it a cap of at most {cap}.",
            field="monthly_spend_cap_microusd",
        )
    key, secret = organizations.create_api_key(
        session,
        org_id=principal.org_id,
        name=body.name,
        scopes=body.scopes,
        monthly_spend_cap_microusd=body.monthly_spend_cap_microusd,
    )
    session.commit()
    return ApiKeyCreated.model_validate({**key.model_dump(), "key": secret})


@router.get("", response_model=ApiKeyList, responses=error_responses(403))
def list_keys(principal: Admin, session: ReadSessionDep) -> ApiKeyList:
    """The caller's organization's keys (never their secrets)."""
    keys = organizations.list_api_keys(session, org_id=principal.org_id)
    return ApiKeyList(keys=[ApiKeyPublic.model_validate(k.model_dump()) for k in keys])


@router.delete("/{key_id}", response_model=ApiKeyPublic, responses=error_responses(403, 404))
def revoke_key(key_id: str, principal: Admin, session: SessionDep) -> ApiKeyPublic:
    """Revoke one of the caller's organization's keys; it stops working at once."""
    key = organizations.get_api_key(session, org_id=principal.org_id, key_id=key_id)
    if key is None:
        raise NotFound(f"Your organization has no key {key_id[:100]}.", field="key_id")
    for scope in key.scopes:
        if not covers(principal.scopes, scope):
            raise Forbidden(
                f"A key cannot revoke a key holding the scope {scope}, which it could not hand out itself.",
                field="key_id",
            )
    organizations.revoke_api_key(session, key=key)
    session.commit()
    return ApiKeyPublic.model_validate(key.model_dump())

"""The publisher list (operator only) and each namespace's signing keys (its organization only)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends
from pydantic import BaseModel
from sqlmodel import select

from api.accounts.scopes import PUBLISHERS_ADMIN, TOOLS_PUBLISH
from api.deps import Principal, PrincipalDep, ReadSessionDep, SessionDep, require
from api.errors import Forbidden, error_responses
from api.models import Publisher, PublisherCreate, PublisherPublic, SigningKeyCreate, SigningKeyPublic
from api.params import Namespace
from api.registry import publishers

router = APIRouter(tags=["publishers"])
PublishersAdmin = Annotated[Principal, Depends(require(PUBLISHERS_ADMIN))]
Publishing = Annotated[Principal, Depends(require(TOOLS_PUBLISH))]


class PublisherList(BaseModel):
    publishers: list[PublisherPublic]


class SigningKeyList(BaseModel):
    keys: list[SigningKeyPublic]


def _operator(principal: Principal) -> None:
    if not principal.is_operator:
        raise Forbidden(
            "Only a key of the operator organization (made by b3os admin init) edits the publisher list."
        )


@router.put(
    "/v1/admin/publishers/{namespace}",
    response_model=PublisherPublic,
    responses=error_responses(400, 403, 404, 413),
)
def put_publisher(
    namespace: Namespace, body: PublisherCreate, principal: PublishersAdmin, session: SessionDep
) -> Publisher:
    """Give a namespace to an organization, by default the caller's (operator only)."""
    _operator(principal)
    org_id = principal.org_id if body.org_id is None else body.org_id
    publisher = publishers.set_publisher(session, namespace=namespace, org_id=org_id)
    session.commit()
    return publisher


@router.get("/v1/admin/publishers", response_model=PublisherList, responses=error_responses(403))
def list_all_publishers(principal: PublishersAdmin, session: ReadSessionDep) -> PublisherList:
    """The whole publisher list (operator only)."""
    _operator(principal)
    rows = session.exec(select(Publisher).order_by(Publisher.namespace)).all()
    return PublisherList(publishers=[PublisherPublic.model_validate(p.model_dump()) for p in rows])


@router.get("/v1/actions/publishers", response_model=PublisherList)
def list_own_publishers(principal: PrincipalDep, session: ReadSessionDep) -> PublisherList:
    """The namespaces the caller's organization publishes into."""
    rows = session.exec(
        select(Publisher).where(Publisher.org_id == principal.org_id).order_by(Publisher.namespace)
    ).all()
    return PublisherList(publishers=[PublisherPublic.model_validate(p.model_dump()) for p in rows])


@router.post(
    "/v1/actions/publishers/{namespace}/keys",
    status_code=201,
    response_model=SigningKeyPublic,
    responses=error_responses(400, 403, 404, 409, 413),
)
def register_key(
    namespace: Namespace, body: SigningKeyCreate, principal: Publishing, session: SessionDep
) -> SigningKeyPublic:
    """Register an Ed25519 public key of the namespace under its kid."""
    publishers.own_publisher(session, namespace=namespace, org_id=principal.org_id)
    key = publishers.register_signing_key(
        session, namespace=namespace, kid=body.kid, public_key=body.public_key
    )
    session.commit()
    return SigningKeyPublic.model_validate(key.model_dump())


@router.get(
    "/v1/actions/publishers/{namespace}/keys",
    response_model=SigningKeyList,
    responses=error_responses(403, 404),
)
def list_keys(namespace: Namespace, principal: Publishing, session: ReadSessionDep) -> SigningKeyList:
    """The namespace's signing keys, revoked ones included."""
    publishers.own_publisher(session, namespace=namespace, org_id=principal.org_id)
    keys = publishers.list_signing_keys(session, namespace=namespace)
    return SigningKeyList(keys=[SigningKeyPublic.model_validate(k.model_dump()) for k in keys])


@router.delete(
    "/v1/actions/publishers/{namespace}/keys/{kid}",
    response_model=SigningKeyPublic,
    responses=error_responses(403, 404),
)
def revoke_key(
    namespace: Namespace, kid: str, principal: Publishing, session: SessionDep
) -> SigningKeyPublic:
    """Revoke a kid: no new version may be published with it."""
    publishers.own_publisher(session, namespace=namespace, org_id=principal.org_id)
    key = publishers.revoke_signing_key(session, namespace=namespace, kid=kid)
    session.commit()
    return SigningKeyPublic.model_validate(key.model_dump())

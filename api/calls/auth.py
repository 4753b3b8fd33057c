"""Who calls an action: an API key, or a routine step of a run the api started.

An API key (`Authorization: Bearer b3_...`) calls for itself. A routine step's call comes from the
routine worker: the worker token (`B3OS_WORKER_TOKEN`) together with its run's grant
(`X-B3OS-Run-Grant`) and step (`X-B3OS-Run-Step`), checked by `api.runs.grants`; the call is then
limited and metered exactly as if the key that started the run had made it. The worker token alone
(with `X-B3OS-On-Behalf-Of` or not) calls nothing, and only over HTTP (`POST /v1/actions/call` and
its cancel). Either way the key must hold `actions:call` and not be revoked. The lookup (one query:
the grant joined with its key, or the key) uses its own short session, so no database transaction
stays open while the call runs.
"""

from __future__ import annotations

import datetime as dt
import hmac
from dataclasses import replace
from typing import Protocol

from fastapi import Request

from api.accounts.scopes import ACTIONS_CALL
from api.accounts.scopes import grants as scope_grants
from api.calls.request import Caller
from api.db import read_session
from api.deps import bearer_token, principal_of
from api.errors import Forbidden, Unauthorized
from api.models import ApiKey
from api.rawsql import Reads
from api.runs import grants
from api.runs.links import Linked

ON_BEHALF_OF = "X-B3OS-On-Behalf-Of"


class CallingKey(Protocol):
    """What a call needs of its key: the row a step's grant names, or the key a request came with
    (`api.accounts.organizations.FoundKey`)."""

    @property
    def id(self) -> str: ...
    @property
    def org_id(self) -> str: ...
    @property
    def scopes(self) -> list[str]: ...
    @property
    def monthly_spend_cap_microusd(self) -> int | None: ...
    @property
    def revoked_at(self) -> dt.datetime | None: ...


def is_worker_token(expected: str | None, token: str) -> bool:
    """Whether `token` is the routine worker's token (`B3OS_WORKER_TOKEN`; none set: nothing is)."""
    return bool(expected) and hmac.compare_digest(token.encode(), str(expected).encode())


def caller_for(
    request: Request, *, surface: str, cancelling: bool = False, linked: Linked | None = None
) -> Caller:
    """The caller of a request to a call surface (its reads: run it with `api.db.run_reading`).

    Args:
        request: The request.
        surface: `http` or `mcp`.
        cancelling: The request cancels a call (a cancelled run's steps may still do that).
        linked: The parent of the child workflow the request comes from, as Temporal said
            (api.runs.links; None: the request names no child workflow).

    Raises:
        Unauthorized: no key, an unknown or revoked key, or the worker token without a run's grant.
        Forbidden: the key lacks `actions:call`; the run's grant does not cover this request.
    """
    token = bearer_token(request)
    if not is_worker_token(request.app.state.settings.worker_token, token):
        key_id = principal_of(request).key_id
        key: CallingKey | None = getattr(request.state, "api_key", None)  # as the key was found
        if key is None:
            with read_session(request.app.state.engine) as session:
                key = session.get(ApiKey, key_id)
        return _caller(key, surface=surface, run_key=None)
    if surface != "http":
        raise Forbidden("The worker token calls only over POST /v1/actions/call, for a routine run's step.")
    secret = request.headers.get(grants.GRANT_HEADER, "").strip()
    if not secret:
        raise Unauthorized(
            f"The worker token alone calls nothing: a routine step's call sends its run's grant "
            f"({grants.GRANT_HEADER}), which the api gives a run when it starts it; start runs with "
            "POST /v1/routines/{name}/runs."
        )
    with Reads(request.app.state.engine) as reads:
        grant = grants.lookup(reads, secret)
    execution = request.headers.get(grants.EXECUTION_HEADER, "").strip()
    if linked is not None:  # a foreach's child workflow: its parent must be the run's execution
        if linked.parent_workflow_id != grant.workflow_id:
            raise grants.not_its_execution(grant.run_id)
        execution = linked.parent_run_id
    step = grants.check(
        grant,
        step=request.headers.get(grants.STEP_HEADER, ""),
        idempotency_key=request.headers.get("Idempotency-Key"),
        cancelling=cancelling,
        execution=execution,
        chunk=linked.workflow_id if linked is not None else None,
    )
    named = request.headers.get(ON_BEHALF_OF, "").strip()
    if named and named != grant.key_id:
        raise Forbidden(f"{ON_BEHALF_OF} names another key than the one that started run {grant.run_id}.")
    if grant.execution_id is None and grant.steps:  # a call before the api wrote what it started
        if not execution or not grants.bind_first(request.app.state.engine, grant.grant_hash, execution):
            raise grants.not_its_execution(grant.run_id)
    caller = _caller(grant.key, surface="routine", run_key=step.key, run_ref=step.ref)
    return replace(
        caller,
        run_id=grant.run_id,
        run_step=request.headers.get(grants.STEP_HEADER, "").strip(),
        run_max_cost=grant.max_cost_microusd,
    )


def _caller(
    key: CallingKey | None, *, surface: str, run_key: str | None, run_ref: str | None = None
) -> Caller:
    if key is None:
        raise Unauthorized("The API key is not valid.")
    if key.revoked_at is not None:
        raise Unauthorized("This API key was revoked.")
    if not scope_grants(key.scopes, ACTIONS_CALL):
        raise Forbidden(f"This key lacks the scope {ACTIONS_CALL}.", missing_scope=ACTIONS_CALL)
    return Caller(
        org_id=key.org_id,
        key_id=key.id,
        spend_cap_microusd=key.monthly_spend_cap_microusd,
        surface=surface,
        run_key=run_key,
        run_ref=run_ref,
    )


def check_run_key(caller: Caller, key: str | None) -> None:
    """Refuse a routine step's cancel of a call that is not its own (by another key, or by call id).

    Raises:
        Forbidden: the caller is a run's step and `key` is not its step's Idempotency-Key.
    """
    if caller.run_key is not None and key != caller.run_key:
        raise Forbidden("A routine step cancels only its own call: send its Idempotency-Key.")

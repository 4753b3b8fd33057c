"""Cancelling a running call: find it (by its id or the Idempotency-Key it was sent with), record the
cancel, and have its executor stop it: a tool call's node kills its VM at once; an HTTP action's
request is abandoned by the api process that runs it (`action_failed` / `cancelled`, never priced).

The call itself is not answered here: its own request ends as the node reports it (a command killed
by SIGKILL is `tool_failed` / `signal`, 502), and the api records and bills that outcome as usual:
compute and the floor when the command ran, never the publisher's price (the node marks the result
`cancelled`, and a cancelled call is never charged the price, even if its tool answered just before
the kill). The cancel is kept in `call_cancels`.

Answers: 202 `{"call_id", "state": "cancelled", "node": "killed" | "not_started" | "unknown" |
"unreachable"}` for a running call; 200 `{"call_id", "state": "finished"}` when it had already ended;
404 `not_found` when the organization has no such call or key; 409 `conflict` (Retry-After 1) when
the key's call is still being placed (no node yet).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sqlalchemy.exc import IntegrityError
from sqlmodel import Session

from api.calls import idempotency
from api.calls.errors import CallError, CallInvalid
from api.calls.executor import HTTP_LANE
from api.calls.tables import DONE, RUNNING, CallCancel, IdempotencyRecord, ToolCall

if TYPE_CHECKING:
    from api.calls.service import Answer, Caller, CallService


class CallNotFound(CallError):
    status = 404
    code = "not_found"


class CallNotPlaced(CallError):
    status = 409
    code = "conflict"


def parse_cancel(payload: Any) -> str:
    """The Idempotency-Key of a cancel request body `{"idempotency_key"}`.

    Raises:
        CallInvalid: naming the field at fault.
    """
    if not isinstance(payload, dict):
        raise CallInvalid("the request body must be a JSON object", details={"field": "body"})
    extra = sorted(set(payload) - {"idempotency_key"})
    if extra:
        raise CallInvalid(f"the field {extra[0]} is not accepted here", details={"field": extra[0]})
    key = payload.get("idempotency_key")
    if not isinstance(key, str):
        raise CallInvalid(
            "the field idempotency_key is required: the Idempotency-Key the call was sent with",
            details={"field": "idempotency_key"},
        )
    return idempotency.check_key(key)


def _find(session: Session, caller: Caller, key: str | None, call_id: str | None) -> ToolCall | None:
    """The caller's call by id or by key (None when it has finished without a row); raises when unknown."""
    if key is not None:
        record = session.get(IdempotencyRecord, (caller.org_id, key))
        if record is None:
            raise CallNotFound(f"this organization has no call with Idempotency-Key {key!r}")
        if record.call_id is None:
            if record.state == DONE:
                return None  # answered before it reached a node
            raise CallNotPlaced(
                f"the call with Idempotency-Key {key!r} has not reached a node yet", retry_after=1
            )
        call_id = record.call_id
    assert call_id is not None
    call = session.get(ToolCall, call_id)
    if call is None or call.org_id != caller.org_id:
        raise CallNotFound(f"this organization has no call {call_id[:60]!r}")
    return call


async def cancel_call(
    service: CallService, caller: Caller, *, key: str | None = None, call_id: str | None = None
) -> Answer:
    """Cancel the caller's call named by `call_id` or by its Idempotency-Key (see the module docstring)."""
    from api.calls.service import Answer

    try:
        call: ToolCall | None = await service._db(lambda s: _find(s, caller, key, call_id))
    except CallError as exc:
        return Answer(exc.status, exc.body(), exc.headers)
    if call is None or call.state != RUNNING:
        found = call.id if call is not None else None
        return Answer(200, {"call_id": found, "state": "finished"})
    state = await service.executor("http" if call.node_id == HTTP_LANE else "vm").cancel(call)

    def record(session: Session) -> None:
        session.add(CallCancel(call_id=call.id, org_id=caller.org_id, key_id=caller.key_id, node_state=state))
        try:
            session.commit()
        except IntegrityError:  # cancelled twice: the first cancel is kept
            session.rollback()

    await service._db(record)
    return Answer(202, {"call_id": call.id, "state": "cancelled", "node": state})

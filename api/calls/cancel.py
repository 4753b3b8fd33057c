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

from collections.abc import Callable

from sqlalchemy.exc import IntegrityError
from sqlmodel import Session

from api.calls.answers import Answer
from api.calls.executor import HTTP_LANE, Executor
from api.calls.request import Caller
from api.calls.sessions import CallSessions
from api.calls.tables import DONE, RUNNING, ActionCall, CallCancel, IdempotencyRecord
from api.errors import CallError


class CallNotFound(CallError):
    status = 404
    code = "not_found"


class CallNotPlaced(CallError):
    status = 409
    code = "conflict"


def _find(session: Session, caller: Caller, key: str | None, call_id: str | None) -> ActionCall | None:
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
    call = session.get(ActionCall, call_id)
    if call is None or call.org_id != caller.org_id:
        raise CallNotFound(f"this organization has no call {call_id[:60]!r}")
    return call


async def cancel_call(
    db: CallSessions,
    executor: Callable[[str], Executor],
    caller: Caller,
    *,
    key: str | None = None,
    call_id: str | None = None,
) -> Answer:
    """Cancel the caller's call named by `call_id` or by its Idempotency-Key (see the module docstring).

    Args:
        db: The call path's database work.
        executor: The executor of an action kind (it stops the call).
    """
    try:
        call: ActionCall | None = await db.run(lambda s: _find(s, caller, key, call_id))
    except CallError as exc:
        return Answer.of_error(exc)
    if call is None or call.state != RUNNING:
        found = call.id if call is not None else None
        return Answer(200, {"call_id": found, "state": "finished"})
    state = await executor("http" if call.node_id == HTTP_LANE else "vm").cancel(call)

    def record(session: Session) -> None:
        session.add(CallCancel(call_id=call.id, org_id=caller.org_id, key_id=caller.key_id, node_state=state))
        try:
            session.commit()
        except IntegrityError:  # cancelled twice: the first cancel is kept
            session.rollback()

    await db.run(record)
    return Answer(202, {"call_id": call.id, "state": "cancelled", "node": state})

"""The `js` executor: a first-party pack's JavaScript, run by the JS runtime of a node.

It places calls as the `vm` executor does (the live nodes that installed the version, the least loaded
first; the same answer, phases and compute units) and adds what js needs:

- `prepare`: the organization's connections the action requires (400 `connection_missing`), before
  admission; an api without an egress proxy token runs no js action of a pack with an egress list
  (503 `action_unavailable`, reason `egress`);
- the node call's `js`: entry, export, the declared errors, the connections' non-secret params, and the
  call's grant (`egress.grants`): the pack's egress list and the connections' sealed credentials, signed
  for this call and valid until its deadline (and a few seconds), with which the node relays the code's
  `fetch` to the proxy; the grant never reaches the code;
- a thrown error whose `code` the action declares becomes `502 action_failed`, reason `pack_error`,
  with `pack_error: {code, message}` and `retryable`, as for HTTP actions; any other thrown error
  `502 action_failed`, reason `js_error`; how the process ended otherwise (time, memory, output) is the
  node's `tool_*` error, as for a hosted tool;
- metering: a hosted tool's units, plus `actions.call` for each exchange through the egress proxy (its
  floor added to the cost's); a failed call is never charged the price.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

from api.calls.errors import ActionFailed, ActionUnavailable
from api.calls.executor import Prepared
from api.calls.needed import needed_connections, store_refreshed
from api.calls.tables import ActionCall
from api.calls.vm import VmExecutor
from api.errors import CallError
from egress.grants import Grant, sign_grant
from packs.manifest import JsImpl

GRANT_SLACK_S = 5.0
EGRESS_RETRY_S = 2.0


class JsExecutor(VmExecutor):
    """Runs `js` actions on the nodes' JS runtime."""

    tier = "js"

    def __init__(self, *, egress_token: str | None, **vm: Any) -> None:
        super().__init__(**vm)
        self._egress_token = egress_token

    async def prepare(self, prepared: Prepared, *, org_id: str) -> Prepared:
        """The connections the action requires (and an egress token to sign its grant with)."""
        resolved = prepared.resolved
        if self._egress_token is None and resolved.manifest.egress_hosts:
            raise ActionUnavailable(
                "this api has no egress proxy configured (B3OS_EGRESS_URL, B3OS_EGRESS_TOKEN), so it runs "
                "no js action that reaches the network; nothing was billed",
                reason="egress",
                retry_after=EGRESS_RETRY_S,
            )
        rows = await needed_connections(self._db, resolved, org_id=org_id)
        state = {
            "params": {key: dict(row.params or {}) for key, row in rows.items()},
            "credentials": [{"id": row.id, "org_id": org_id, "sealed": row.sealed} for row in rows.values()],
        }
        return replace(prepared, state=state)

    def _more(self, call: ActionCall, prepared: Prepared) -> dict[str, Any]:
        resolved = prepared.resolved
        impl = resolved.action.impl
        assert isinstance(impl, JsImpl)
        grant = ""
        if self._egress_token is not None:
            grant = sign_grant(
                self._egress_token,
                Grant(
                    call_id=call.id,
                    pack=resolved.pack,
                    egress=resolved.manifest.egress_hosts,
                    credentials=prepared.state["credentials"],
                    expires_at=time.time() + call.timeout_ms / 1000 + GRANT_SLACK_S,
                ),
            )
        return {
            "cmd": [],
            "js": {
                "entry": impl.entry,
                "export": impl.export,
                "errors": [e.model_dump() for e in impl.errors],
                "connections": prepared.state["params"],
                "grant": grant,
            },
        }

    async def _after(self, call: ActionCall, prepared: Prepared, result: dict[str, Any]) -> None:
        """Keep the OAuth2 tokens the proxy refreshed during the code's fetches (the node passes them on)."""
        sent = prepared.state["credentials"]
        await store_refreshed(self._db, org_id=call.org_id, sent=sent, refreshed=result.get("refreshed"))

    def _refine(self, error: CallError, prepared: Prepared) -> CallError:
        impl = prepared.resolved.action.impl
        assert isinstance(impl, JsImpl)
        if error.code != "tool_failed" or error.reason != "tool_error":
            return error
        code, message = str(error.details.get("tool_code")), str(error.details.get("tool_message", ""))
        declared = next((e for e in impl.errors if e.code == code), None)
        if declared is None:
            return ActionFailed(f"the action's code failed: {message}", reason="js_error")
        return ActionFailed(
            f"{prepared.resolved.pack}: {code}: {message}",
            reason="pack_error",
            details={"pack_error": {"code": code, "message": message}, "retryable": declared.retryable},
        )

"""What differs between action kinds on the one call path: an executor per `impl.kind`.

    resolve (api.registry.catalog) -> admit (key, idempotency, input, limits) -> execute -> meter, answer

The service does everything shared; an executor does what its kind needs:

- `read` and `prepare`, before admission: what the call needs and can be refused for without a charge
  (a `vm` action: the live nodes that have the version; an `http` action: the organization's
  connections and the evaluated request). `read` runs in the read session (and thread) that resolved
  the ref, so a call's preparation costs one thread hop and one database transaction; `prepare` does
  what needs the event loop;
- `execute`, once admitted: run it and say how it ended (`Execution`: the checked output or the
  error, whether the work started, its cost and units, its timing phases);
- `cancel`: stop a running call.

`lane` is the `node_id` a call's row holds while it runs: the node's id for `vm`, `http` for every
HTTP action (the organization's limit of calls at once is counted per lane).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from api.calls.costs import Cost
from api.calls.inputs import CheckedInput
from api.calls.tables import ActionCall
from api.errors import CallError
from api.nodes import LiveNode
from api.rawsql import Reads
from packs.resolve import Resolved

HTTP_LANE = "http"


@dataclass(frozen=True)
class Prepared:
    """A call ready to be admitted: the target, its checked input and what its executor prepared."""

    resolved: Resolved
    checked: CheckedInput
    price: int
    timeout_ms: int
    nodes: list[LiveNode] = field(default_factory=list)
    state: Any = None


@dataclass
class Execution:
    """How an admitted call ended."""

    output: Any = None
    error: CallError | None = None
    ran: bool = False
    cost: Cost = field(default_factory=Cost)
    units: list[tuple[str, int]] = field(default_factory=list)
    vcpu_ms: int = 0
    gib_ms: int = 0
    phases: dict[str, float] = field(default_factory=dict)
    elsewhere: bool = False  # nothing the api can believe ran: the call may be placed again, elsewhere


class Executor(Protocol):
    """Runs the actions of one `impl.kind`."""

    tier: str

    def read(self, reads: Reads, prepared: Prepared, *, org_id: str) -> Prepared:
        """Add what the call needs from the database (in the resolve's reads, where `api.db.run_reading`
        puts reads), or raise its `CallError` (nothing charged)."""
        ...

    async def prepare(self, prepared: Prepared, *, org_id: str) -> Prepared:
        """Add what the call needs before admission, or raise its `CallError` (nothing charged)."""
        ...

    async def execute(self, call: ActionCall, prepared: Prepared) -> Execution:
        """Run the admitted call and say how it ended (errors are in the Execution, not raised)."""
        ...

    async def cancel(self, call: ActionCall) -> str:
        """Stop a running call; the state the cancel reached (`killed`, `stopped`, `unknown`, ...)."""
        ...

"""What the runner needs for js calls: the runtime layer, the check of the entry, and each call's relay."""

from __future__ import annotations

import threading
from pathlib import Path

import httpx

from node.js.relay import Relay
from node.models import NodeCall
from node.vm.base import Vm, VmError

EGRESS_SOCKET = "egress.sock"  # a js call's only way out, at /in/egress.sock (node/js/relay.py)


class JsCalls:
    """The node's JS runtime (`runtime`, node/js/runtime.py) and where its calls' fetches go."""

    def __init__(self, runtime: Path | None, egress_url: str | None) -> None:
        self.runtime = runtime
        self.egress_url = egress_url
        self._client: httpx.Client | None = None  # to the egress proxy, shared by the relays
        self._lock = threading.Lock()

    def layer(self) -> Path:
        """The runtime's directory, the lower layer of a js call's /tool.

        Raises:
            VmError: reason "exec": this node has no JS runtime.
        """
        if self.runtime is None:
            raise VmError("exec", "this node has no JS runtime (Node.js), so it runs no js actions")
        return self.runtime

    @staticmethod
    def missing_entry(call: NodeCall, tool_dir: Path) -> str:
        """Why the call's entry cannot run ("" when it is a file of the pack)."""
        assert call.js is not None
        if not (tool_dir / call.js.entry).is_file():
            return f"{call.js.entry} is not a file of the pack"
        return ""

    def relay(self, vm: Vm, call: NodeCall, deadline: float) -> Relay:
        """Start the call's relay on a socket of its VM.

        Raises:
            VmError: reason "copy": the socket could not be made.
        """
        assert call.js is not None
        return Relay(
            vm.listen_unix(EGRESS_SOCKET),
            egress_url=self.egress_url,
            grant=call.js.grant,
            deadline=deadline,
            client=self._shared_client(),
        )

    def close(self) -> None:
        """Close the relays' HTTP client (at the node's shutdown)."""
        with self._lock:
            if self._client is not None:
                self._client.close()
                self._client = None

    def _shared_client(self) -> httpx.Client:
        """The one HTTP client of the relays (made on first use: making one costs ~20 ms)."""
        with self._lock:
            if self._client is None:
                self._client = httpx.Client(follow_redirects=False, limits=httpx.Limits(max_connections=64))
            return self._client

"""The json-stdio runner: one tool call in one fresh VM, exactly as the hosted-tools seed says.

The tool gets one JSON object on stdin (`action`, `input` with each file as `{path, name, bytes,
contentType}`, `limits` `{timeoutMs, maxOutputBytes}`, `call.id`); the last line of its stdout must be
`{"output": {...}}` (a file as `{"path": "/out/<name>"}`) or `{"error": {"code", "message", "retryable"}}`.
stdout is read up to 1 MiB; stderr is discarded. Output files (top-level output values that are exactly
`{"path": ...}`) are read from /out and returned as `{"$bytes", "name", "bytes", "contentType"}`.

Outcomes map to the seed's errors: `tool_failed` (`unpack`, `exit`, `signal`, `protocol`, `tool_error`,
`output_file`, `output_too_large`), `tool_timed_out`, `tool_unavailable` (`no_slot`, `copy`, `exec`) and
`pack_unavailable` when the version is not installed here. `ran` says whether the command started. A call
with less than `MIN_START_MS` of its time left when its command would start is `no_slot` (it could do
nothing useful, and the reason does not depend on how fast the node was).

`Runner.cancel(call_id)` kills a running call's VM at once: the call then answers how its command really
ended (killed by SIGKILL: `tool_failed` / `signal`, `ran: true`), with `cancelled: true` in the result. A call
cancelled before its command started answers `tool_unavailable` / `exec` (nothing ran); a cancel that comes
before the call itself is remembered for `CANCEL_MEMORY_S`, and that call is answered so at once.

The VMs of one tenant (`NodeCall.tenant`: the api sends one per organization; a call without one is a
tenant of its own) share one VM's CPU weight: with n of its calls running, each VM weighs 1/n of a lone
VM (`Vm.share_cpu`), so when the node's CPU is contended, a tenant with many calls running gets what a
tenant with one gets, not n times as much.

A version whose installed tree is gone from the cache when a call claims it (an operator deleted it)
answers `tool_failed` / `unpack` (nothing ran), and the version is dropped from the cache: the next
heartbeat no longer lists it, so the api stops placing calls here, and later calls answer
`pack_unavailable` with the reason.
"""

from __future__ import annotations

import base64
import binascii
import itertools
import json
import math
import mimetypes
import signal
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cachetools import TTLCache

from node.answers import clean_message, fail, parse_answer
from node.cache import InstallCache
from node.errors import NodeError
from node.js.calls import JsCalls
from node.js.relay import Relay
from node.js.runtime import js_cmd
from node.models import NodeCall, NodeCallError, NodeCallResult
from node.vm.base import InputFile, OutputFileError, PhaseClock, RunResult, Vm, VmDriver, VmError
from packs.names import FILE_NAME_RE

MAX_STDOUT_BYTES = 1024 * 1024
MIN_START_MS = 5
CANCEL_MEMORY_S = 120.0  # longer than any call may wait to reach the node (60 s and the api's slack)
DEFAULT_CONTENT_TYPE = "application/octet-stream"


class InvalidCall(NodeError, ValueError):
    """The call's input cannot be given to a tool; the message names the field."""


def content_type_of(name: str) -> str:
    """The content type of a file from its name (application/octet-stream when unknown)."""
    return mimetypes.guess_type(name, strict=False)[0] or DEFAULT_CONTENT_TYPE


def split_input(call: NodeCall) -> tuple[dict[str, Any], list[InputFile]]:
    """The tool's `input` (file values replaced by `{path, name, bytes, contentType}`) and the files.

    Raises:
        InvalidCall: a file field's value is not `{"$bytes": <base64>, "name": <file name>}`.
    """
    tool_input = dict(call.input)
    files: list[InputFile] = []
    for field in call.file_fields:
        value = tool_input.get(field)
        if value is None:
            continue
        if not isinstance(value, dict) or not isinstance(value.get("$bytes"), str):
            raise InvalidCall(f'input.{field} is not a file value {{"$bytes": <base64>, "name": <name>}}')
        name = value.get("name")
        if not isinstance(name, str) or FILE_NAME_RE.match(name) is None:
            raise InvalidCall(f"input.{field}.name {name!r} is not a name matching {FILE_NAME_RE.pattern}")
        try:
            data = base64.b64decode(value["$bytes"], validate=True)
        except (binascii.Error, ValueError):
            raise InvalidCall(f"input.{field}.$bytes is not base64") from None
        ctype = value.get("contentType")
        ctype = ctype if isinstance(ctype, str) and ctype else content_type_of(name)
        f = InputFile(field=field, name=name, data=data, content_type=ctype)
        files.append(f)
        tool_input[field] = {"path": f.vm_path, "name": name, "bytes": len(data), "contentType": ctype}
    return tool_input, files


def _signal_name(num: int) -> str:
    try:
        return signal.Signals(num).name
    except ValueError:
        return f"signal {num}"


@dataclass
class _Held:
    """A call the runner holds: its VM once claimed, and whether it was cancelled."""

    vm: Vm | None = None
    cancelled: bool = False


class Runner:
    """Runs calls on VMs from a driver, at most `slots` at once."""

    def __init__(
        self,
        driver: VmDriver,
        cache: InstallCache,
        *,
        slots: int = 8,
        memory_mb: int = 512,
        js_runtime: Path | None = None,
        egress_url: str | None = None,
        js_driver: VmDriver | None = None,
    ) -> None:
        self.driver = driver
        self.js_driver = js_driver or driver  # the microvm guest has no Node.js: js calls keep the sandbox
        self.js = JsCalls(js_runtime, egress_url)  # node/js/: the runtime and where fetches are relayed
        self.cache = cache
        self.slots = slots
        self.memory_mb = memory_mb
        self._sem = threading.BoundedSemaphore(slots)
        self._deadlines: dict[int, float] = {}
        self._lock = threading.Lock()
        self._ids = itertools.count()
        self._held: dict[str, _Held] = {}
        self._cancelled_early: TTLCache[str, bool] = TTLCache(
            maxsize=math.inf, ttl=CANCEL_MEMORY_S, timer=time.monotonic
        )
        self._tenants: dict[str, list[Vm]] = {}  # tenant -> its VMs running a call

    def cancel(self, call_id: str) -> str:
        """Cancel a call: kill its VM if its command runs, else keep it from starting.

        Returns:
            "killed" (its VM was killed), "not_started" (it will not start) or "unknown" (the call is not
            here: it already ended, or has not arrived yet; if it arrives within `CANCEL_MEMORY_S` it is
            answered as cancelled at once).
        """
        with self._lock:
            held = self._held.get(call_id)
            if held is None:
                self._cancelled_early[call_id] = True
                return "unknown"
            held.cancelled = True
            vm = held.vm
        if vm is None:
            return "not_started"
        vm.kill()
        return "killed"

    def retry_after_s(self) -> int:
        """Whole seconds (at least 1) to the soonest deadline of the running calls: a slot is free by then."""
        with self._lock:
            soonest = min(self._deadlines.values(), default=None)
        if soonest is None:
            return 1
        return max(1, math.ceil(soonest - time.monotonic()))

    def call(self, call: NodeCall, *, received: float | None = None) -> NodeCallResult:
        """Run one call and answer for every outcome (never raises for the tool's behaviour).

        Raises:
            InvalidCall: the call's input cannot be given to the tool.
        """
        received = time.monotonic() if received is None else received
        deadline = received + call.timeout_ms / 1000
        tool_input, files = split_input(call)
        tool_dir = self.cache.tool_dir(call.pack, call.version)
        if tool_dir is None:
            why = self.cache.failure(call.pack, call.version)
            message = f"{call.pack}@{call.version} is not installed on this node" + (
                f": {why}" if why else ""
            )
            return NodeCallResult(ok=False, ran=False, error=fail("pack_unavailable", None, message))
        with self._lock:
            if self._cancelled_early.pop(call.call_id, False):
                message = "the call was cancelled before it reached this node"
                error = fail("tool_unavailable", "exec", message)
                return NodeCallResult(ok=False, ran=False, error=error, cancelled=True)
            held = self._held[call.call_id] = _Held()
        try:
            result = self._call(call, held, tool_input, files, tool_dir, deadline)
        finally:
            with self._lock:
                if self._held.get(call.call_id) is held:
                    del self._held[call.call_id]
        if held.cancelled:
            result.cancelled = True
            if result.error is not None:
                result.error.message += " (the call was cancelled)"
        return result

    def _call(
        self,
        call: NodeCall,
        held: _Held,
        tool_input: dict[str, Any],
        files: list[InputFile],
        tool_dir: Path,
        deadline: float,
    ) -> NodeCallResult:
        clock = PhaseClock()
        if not self._sem.acquire(timeout=max(0.0, deadline - time.monotonic())):
            return NodeCallResult(
                ok=False, ran=False, error=fail("tool_unavailable", "no_slot", "no VM was free in time")
            )
        vm: Vm | None = None
        relay: Relay | None = None
        token = next(self._ids)
        with self._lock:
            self._deadlines[token] = deadline
        try:
            with clock.phase("start"):
                vm = (self.driver if call.js is None else self.js_driver).claim(deadline)
            with self._lock:
                held.vm = vm
                self._share(call.tenant or f"call:{call.call_id}", joining=vm)
            with clock.phase("copy"):
                vm.copy(tool_dir, files)
                if call.js is not None:
                    relay = self.js.relay(vm, call, deadline)
            with clock.phase("unpack"):
                vm.unpack(self.js.layer() if call.js is not None else None)
            exec_error = (
                self._check_exec(tool_dir, call.cmd[0])
                if call.js is None
                else self.js.missing_entry(call, tool_dir)
            )
            if exec_error:
                raise VmError("exec", exec_error)
            with self._lock:
                if held.cancelled:
                    raise VmError("exec", "the call was cancelled before its command started")
            remaining = deadline - time.monotonic()
            if remaining < MIN_START_MS / 1000:
                raise VmError("no_slot", "the call's time ran out before its command could start")
            request = {
                "action": call.action,
                "input": tool_input,
                "limits": {"timeoutMs": call.timeout_ms, "maxOutputBytes": call.max_output_bytes},
                "call": {"id": call.call_id},
            }
            if call.js is not None:
                request["js"] = call.js.model_dump(include={"entry", "export", "errors", "connections"})
            with clock.phase("run"):
                run = vm.run(
                    call.cmd or js_cmd(),
                    json.dumps(request).encode(),
                    timeout_s=remaining,
                    max_stdout=MAX_STDOUT_BYTES,
                )
            with clock.phase("collect"):
                result = self._answer(call, vm, run, round(remaining * 1000))
        except VmError as exc:
            code = "tool_failed" if exc.reason == "unpack" else "tool_unavailable"
            if exc.reason == "unpack":
                self.cache.forget(call.pack, call.version, exc.message)
            result = NodeCallResult(ok=False, ran=False, error=fail(code, exc.reason, exc.message))
        finally:
            if relay is not None:
                relay.close()
            if vm is not None:
                with self._lock:
                    self._share(call.tenant or f"call:{call.call_id}", leaving=vm)
                with clock.phase("delete"):
                    vm.delete()
            with self._lock:
                del self._deadlines[token]
            self._sem.release()
        result.timings = clock.as_dict()
        if relay is not None and result.ran:  # the egress proxy's exchanges, metered as HTTP action calls
            result.usage["requests"] = relay.requests
            result.refreshed = relay.refreshed
        return result

    def _share(self, tenant: str, *, joining: Vm | None = None, leaving: Vm | None = None) -> None:
        """With `self._lock` held: a VM joins or leaves its tenant's running VMs; each then weighs 1/n."""
        vms = self._tenants.setdefault(tenant, [])
        if joining is not None:
            vms.append(joining)
        if leaving in vms:
            vms.remove(leaving)
        for vm in vms:
            vm.share_cpu(1 / len(vms))
        if not vms:
            del self._tenants[tenant]

    @staticmethod
    def _check_exec(tool_dir: Path, first: str) -> str:
        rel = first.removeprefix("/tool/")
        target = tool_dir / rel
        if not target.is_file():
            return f"cmd[0] {first} is not a file of the tool"
        if not target.stat().st_mode & 0o001:
            return f"cmd[0] {first} is not executable by the VM's user"
        return ""

    def _answer(self, call: NodeCall, vm: Vm, run: RunResult, command_ms: int) -> NodeCallResult:
        if not run.started:
            raise VmError("exec", run.exec_error or "the command could not be started")
        usage = {"vcpu_ms": run.usage.vcpu_ms, "gib_ms": run.usage.gib_ms}
        error = self._run_error(call, run, command_ms)
        if error is None:
            answer, error = parse_answer(run.stdout)
            if error is None and "error" in answer:
                tool = answer["error"]
                error = fail(
                    "tool_failed",
                    "tool_error",
                    f"the tool answered with its error {tool['code']}: {tool['message']}",
                    tool_code=tool["code"],
                    tool_message=tool["message"],
                    retryable=tool["retryable"],
                )
            if error is None:
                try:
                    return NodeCallResult(
                        ok=True, ran=True, output=self._files(call, vm, answer), usage=usage
                    )
                except OutputFileError as exc:
                    error = fail("tool_failed", "output_file", clean_message(str(exc)))
        return NodeCallResult(ok=False, ran=True, error=error, usage=usage)

    def _run_error(self, call: NodeCall, run: RunResult, command_ms: int) -> NodeCallError | None:
        """The error of how the command ended (None when it answered), `command_ms` being the time it had."""
        if run.timed_out:
            before_ms = call.timeout_ms - command_ms
            message = f"the tool's command did not finish in {call.timeout_ms} ms"
            if before_ms * 4 > call.timeout_ms:  # the node's own time before the command is worth saying
                message = (
                    f"the tool's command did not finish in the {command_ms} ms left of the call's "
                    f"{call.timeout_ms} ms: the node took {before_ms} ms to start it (a free slot, its VM)"
                )
            return fail("tool_timed_out", None, message)
        if run.stdout_too_large:
            return fail(
                "tool_failed",
                "output_too_large",
                f"the tool wrote more than {MAX_STDOUT_BYTES} bytes to stdout",
            )
        if run.lost:
            return fail("tool_failed", "exit", "the VM stopped answering while the command ran")
        if run.signal is not None:
            why = f" after it used all of the VM's {self.memory_mb} MiB of memory" if run.oom_killed else ""
            return fail(
                "tool_failed",
                "signal",
                f"the tool was killed by signal {run.signal} ({_signal_name(run.signal)}){why}",
                signal=run.signal,
            )
        if run.exit_code:
            return fail(
                "tool_failed", "exit", f"the tool exited with status {run.exit_code}", exit_code=run.exit_code
            )
        return None

    @staticmethod
    def _files(call: NodeCall, vm: Vm, answer: dict[str, Any]) -> dict[str, Any]:
        output: dict[str, Any] = dict(answer["output"])
        wanted: dict[str, str] = {}
        declared = call.output_file_fields
        for key, value in output.items():
            if declared is not None and key not in declared:
                continue  # only properties the output schema declares as files become files
            if isinstance(value, dict) and set(value) == {"path"}:
                path = value["path"]
                if not isinstance(path, str) or not path.startswith("/out/"):
                    raise OutputFileError(f"output.{key}.path {path!r} is not a file directly under /out")
                wanted[key] = path.removeprefix("/out/")
        if not wanted:
            return output
        data = vm.collect(list(dict.fromkeys(wanted.values())), max_total=call.max_output_bytes)
        for key, name in wanted.items():
            output[key] = {
                "$bytes": base64.b64encode(data[name]).decode(),
                "name": name,
                "bytes": len(data[name]),
                "contentType": content_type_of(name),
            }
        return output

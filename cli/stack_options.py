"""Where the embedded stack starts: its ports (flags, then B3OS_DEV_*_PORT, then the defaults, each refused
with a sentence when it is no port or taken), its data dir and the example packs it publishes; the flags
every command that starts it takes (`b3os dev`, `b3os demo`); the api's command line and the secrets each
part is given."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from cli.stack import StackError, port_taken
from http1.server import SERVER_PROTOCOL

REPO = Path(__file__).resolve().parent.parent
DEFAULT_PORTS = {"api": 8700, "node": 8710, "egress": 8720, "temporal": 7233, "ui": 8233}
PORT_FLAGS = {
    "api": "--port",
    "node": "--node-port",
    "egress": "--egress-port",
    "temporal": "--temporal-port",
    "ui": "--ui-port",
}
PORT_ENV = {name: f"B3OS_DEV_{name.upper()}_PORT" for name in DEFAULT_PORTS}
PORT_USERS = {
    "api": "the api",
    "node": "the node",
    "egress": "the egress proxy",
    "temporal": "Temporal",
    "ui": "the Temporal UI",
}


@dataclass(frozen=True)
class Options:
    """What to start and where."""

    data_dir: Path
    ports: Mapping[str, int]
    examples: Path = REPO / "examples" / "tools"
    packs: Path = REPO / "examples" / "packs"
    ready_timeout_s: float = 90.0


def add_stack_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags every command that starts the embedded stack takes (ports, data dir, examples)."""
    for name, flag in PORT_FLAGS.items():
        parser.add_argument(
            flag,
            dest=f"{name}_port",
            type=int,
            default=None,
            metavar="PORT",
            help=f"the {name} port on 127.0.0.1 (default ${PORT_ENV[name]} or {DEFAULT_PORTS[name]})",
        )
    parser.add_argument("--data-dir", type=Path, default=Path(".b3os"), help="the state directory (.b3os)")
    parser.add_argument(
        "--examples",
        type=Path,
        default=REPO / "examples" / "tools",
        help="the tool packs to build and publish (default examples/tools)",
    )
    parser.add_argument(
        "--packs",
        type=Path,
        default=REPO / "examples" / "packs",
        help="the declarative packs to build and publish (default examples/packs)",
    )


def options_from_args(args: argparse.Namespace, environ: Mapping[str, str] | None = None) -> Options:
    """Options from parsed flags, then B3OS_DEV_*_PORT, then the defaults.

    Raises:
        StackError: a port variable is not a port number.
    """
    return Options(
        data_dir=Path(args.data_dir).resolve(),
        ports=resolve_ports({n: getattr(args, f"{n}_port", None) for n in DEFAULT_PORTS}, environ),
        examples=Path(args.examples),
        packs=Path(getattr(args, "packs", REPO / "examples" / "packs")),
    )


def resolve_ports(
    flags: Mapping[str, int | None], environ: Mapping[str, str] | None = None
) -> dict[str, int]:
    """Each port from its flag, else its B3OS_DEV_*_PORT variable, else its default.

    Raises:
        StackError: a value is not a port number (1 to 65535); the sentence names it.
    """
    env = os.environ if environ is None else environ
    ports: dict[str, int] = {}
    for name, default in DEFAULT_PORTS.items():
        given = flags.get(name)
        raw: str | None
        if given is not None:
            where, raw = PORT_FLAGS[name], str(given)
        else:
            where, raw = PORT_ENV[name], env.get(PORT_ENV[name])
        if raw is None or raw == "":
            ports[name] = default
            continue
        if not raw.isdigit() or not 1 <= int(raw) <= 65535:
            raise StackError(f"{where} {raw!r} is not a port number (1 to 65535)")
        ports[name] = int(raw)
    names = sorted(ports, key=lambda n: ports[n])
    for a, b in zip(names, names[1:], strict=False):
        if ports[a] == ports[b]:
            raise StackError(f"the {a} and {b} ports are both {ports[a]}: give each its own")
    return ports


def check_ports(ports: Mapping[str, int]) -> None:
    """Refuse, naming the first taken port and how to choose another.

    Raises:
        StackError: a port is in use on 127.0.0.1.
    """
    for name, port in ports.items():
        if port_taken(port):
            raise StackError(
                f"port {port} on 127.0.0.1 (for {PORT_USERS[name]}) is taken: "
                "is a stack already running (b3os dev)? "
                f"Stop what uses it, or choose another port with {PORT_FLAGS[name]} or {PORT_ENV[name]}."
            )


SECRETS_OF = {
    "temporal": (),
    "egress": ("B3OS_EGRESS_TOKEN", "B3OS_EGRESS_KEY_FILE"),
    "api": ("B3OS_WORKER_TOKEN", "B3OS_EGRESS_TOKEN"),
    "node": ("B3OS_NODE_CREDENTIAL",),
    "worker": ("B3OS_WORKER_TOKEN",),
}
"""The secrets each part of the stack is given: the ones it uses, no others."""


def api_argv(port: int) -> list[str]:
    """The command line of one api process on 127.0.0.1:`port` (uvicorn over `api.main:create_app`)."""
    return [
        sys.executable, "-m", "uvicorn", "--factory", "api.main:create_app", "--http", SERVER_PROTOCOL,
        "--host", "127.0.0.1", "--port", str(port), "--log-level", "warning",
    ]  # fmt: skip

"""Run a node worker: the VM pool, the json-stdio runner and POST /v1/node/calls on 127.0.0.1.

Reads B3OS_* settings: B3OS_NODE_ID and B3OS_NODE_CREDENTIAL are required (from `b3os node credential
issue NODE_ID` on the api's database); B3OS_API_URL turns on heartbeat and registry sync.
Needs root (namespaces, cgroups, mounts) and the base template (`b3os node build-base`); with
B3OS_NODE_DRIVER=microvm also QEMU and the guest (`b3os node build-guest`). Says at start what isolates
its calls (`sandbox`, `microvm/kvm` or `microvm/tcg`, and why), as its heartbeat does.
"""

from __future__ import annotations

import argparse
import sys


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8710, help="port to listen on (default 8710)")
    parser.add_argument("--log-level", default="warning", help="uvicorn log level (default warning)")


def run(args: argparse.Namespace) -> int:
    import uvicorn
    from pydantic import ValidationError

    from cli.http_limits import bounded_http
    from node.app import create_app, isolation, make_driver
    from node.config import Settings
    from node.template import is_built
    from node.vm.base import VmError

    try:
        settings = Settings()
    except ValidationError as exc:
        print(
            f"b3os node run: bad setting: {exc.errors()[0]['loc'][0]}: {exc.errors()[0]['msg']}",
            file=sys.stderr,
        )
        return 2
    if not settings.node_id or not settings.node_credential.get_secret_value():
        print(
            "b3os node run: set B3OS_NODE_ID and B3OS_NODE_CREDENTIAL (b3os node credential issue NODE_ID "
            "prints both)",
            file=sys.stderr,
        )
        return 2
    if not is_built(settings.base_dir):
        print(
            f"b3os node run: no base template in {settings.base_dir}: run `b3os node build-base`",
            file=sys.stderr,
        )
        return 2
    http = bounded_http("b3os node run")
    if http is None:
        return 2
    try:
        driver = make_driver(settings)
    except VmError as exc:
        print(f"b3os node run: {exc.message}", file=sys.stderr)
        return 1
    what, why = isolation(driver)
    print(f"b3os node run: calls run in {what} ({why})", file=sys.stderr, flush=True)
    try:
        app = create_app(settings, port=args.port, driver=driver)
    except BaseException:
        driver.close()
        raise
    try:
        uvicorn.run(
            app, host=args.host, port=args.port, http=http, log_level=args.log_level, use_colors=False
        )
    finally:
        driver.close()  # again, for when the app never started (a port in use); closing twice is harmless
    return 0

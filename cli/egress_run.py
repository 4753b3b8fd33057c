"""Run the egress proxy of declarative actions: POST /v1/egress/fetch on 127.0.0.1.

Reads B3OS_EGRESS_* settings: B3OS_EGRESS_TOKEN (required; the api presents it), B3OS_EGRESS_KEY_FILE
(the X25519 key connection secrets are sealed to; made on first start), B3OS_EGRESS_CONNECT_TO and
B3OS_EGRESS_CA_FILE (operator seams: reach a host at another address, trust one more CA).
"""

from __future__ import annotations

import argparse
import sys


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--host", default=None, help="address to listen on (default B3OS_EGRESS_HOST or 127.0.0.1)"
    )
    parser.add_argument(
        "--port", type=int, default=None, help="port to listen on (default B3OS_EGRESS_PORT or 8720)"
    )
    parser.add_argument("--log-level", default="warning", help="uvicorn log level (default warning)")


def run(args: argparse.Namespace) -> int:
    import uvicorn
    from pydantic import ValidationError

    from cli.http_limits import bounded_http
    from egress.app import create_app
    from egress.config import EgressSettings
    from egress.sealing import SealError

    try:
        settings = EgressSettings()  # type: ignore[call-arg]  # (the token comes from the environment)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = str(first["loc"][0]) if first["loc"] else "settings"
        if first["type"] == "missing":
            print(f"b3os egress run: B3OS_EGRESS_{field.upper()} is not set", file=sys.stderr)
        else:
            message = str(first["msg"]).removeprefix("Value error, ")
            print(f"b3os egress run: bad setting B3OS_EGRESS_{field.upper()}: {message}", file=sys.stderr)
        return 2
    host = args.host or settings.host
    port = settings.port if args.port is None else args.port
    try:
        app = create_app(settings)
    except SealError as exc:
        print(f"b3os egress run: {exc}", file=sys.stderr)
        return 2
    print(
        f"egress proxy on http://{host}:{port} (public key {app.state.public_key})",
        file=sys.stderr,
        flush=True,
    )
    http = bounded_http("b3os egress run")
    if http is None:
        return 2
    uvicorn.run(app, host=host, port=port, http=http, log_level=args.log_level, use_colors=False)
    return 0

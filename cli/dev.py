"""Run the embedded stack in the foreground: Temporal, the egress proxy, the api, a node and the routine
worker on 127.0.0.1.

State lives under .b3os/ (SQLite b3os.db, temporal.db, blobs/, node/cache/, build/, egress/egress.key,
logs/<part>.log). Ports: api 8700, node 8710, egress proxy 8720, Temporal 7233, Temporal UI 8233 (flags
below, or B3OS_DEV_API_PORT, B3OS_DEV_NODE_PORT, B3OS_DEV_EGRESS_PORT, B3OS_DEV_TEMPORAL_PORT,
B3OS_DEV_UI_PORT). The node needs root and the base template (`b3os node build-base`). On first start
it creates a dev organization (the operator) and a dev key, gives it the publisher namespaces
com.example.tools and io.b3os with the signing keys com.example.tools#dev and io.b3os#dev (generated
into $B3OS_KEYS_DIR or ~/.b3os/keys), builds and publishes the example tools (examples/tools/*) and the
example declarative packs (examples/packs/*), issues the node its own credential (as `b3os node credential
issue` does), and writes B3OS_API_URL, B3OS_API_KEY, B3OS_DEV_KID, B3OS_NODE_ID, B3OS_NODE_CREDENTIAL,
B3OS_WORKER_TOKEN, B3OS_EGRESS_URL, B3OS_EGRESS_TOKEN and B3OS_TEMPORAL_ADDRESS to .b3os/dev.env (mode
0600). Later starts reuse all of it. Each part is ready before the next starts (the node has installed
the published tools from the registry feed). Once all are up, a part that exits (a crash, SIGKILL, even
Temporal's dev server) is started again after a backoff (0.5 s doubling to 10 s, back to 0.5 s once it ran
30 s; `cli.supervise`), said on stderr as one line, while the others keep running: runs in flight finish
(a step whose node died is retried by Temporal once the node is back). A part that keeps dying is retried
every 10 s for as long as `b3os dev` runs. Ctrl-C or SIGTERM stops every child and their children.
"""

from __future__ import annotations

import argparse
import sys

from cli._embedded import start_embedded
from cli._http import CliError
from cli.stack import Stack, StackError
from cli.stack_options import add_stack_arguments, options_from_args


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_stack_arguments(parser)


def run(args: argparse.Namespace) -> int:
    stack = Stack(args.data_dir.resolve() / "logs")
    stack.install_signal_handlers()
    try:
        options = options_from_args(args)
        emb = start_embedded(stack, options, say=lambda line: print(line, flush=True))
    except (CliError, StackError) as exc:
        print(f"b3os dev: {exc}", file=sys.stderr)
        stack.stop()
        return 1
    print(f"api      {emb.api_url}  (OpenAPI docs at {emb.api_url}/docs)")
    print(f"temporal {emb.temporal_address}  (UI {emb.ui_url})")
    print(f"env      {emb.dev_env}  (B3OS_API_URL, B3OS_API_KEY, B3OS_NODE_CREDENTIAL, ...)")
    print(f"logs     {stack.log_dir}")
    for pin in emb.pins:
        print(f"published {pin}")
    print("ready: a part that dies is restarted; Ctrl-C stops everything", flush=True)
    code = stack.wait()
    stack.stop()
    return code

"""The floor of the api's CPU per noop call: a bare FastAPI app on uvicorn whose one route takes a call's
body (a pydantic model) and sends the node the request the api sends for it (`api.calls.nodeclient`:
signed, over the api's HTTP/1.1 client, the answer's proof checked), then answers the node's result. No
key, registry, input schema, limits, database or metering: what any api in this stack pays to pass a
call on to its node.

`bench goals` starts it as a process of its own (`python -m bench.api_floor PORT NODE_URL NODE_ID
`; the node's call key in `B3OS_BENCH_NODE_KEY`) and times its CPU per noop call beside the api's. It
runs the api's HTTP protocol (`http1.server`).
"""

from __future__ import annotations

import itertools
import os
import sys
from typing import Any

import uvicorn
from fastapi import FastAPI
from pydantic import BaseModel

from api.calls.nodeclient import NodeTarget, send_call
from http1.client import Http1
from http1.server import BoundedHttp


class CallBody(BaseModel):
    ref: str
    input: dict[str, Any]


def make_app(node: NodeTarget) -> FastAPI:
    app = FastAPI()
    client = Http1()
    ids = itertools.count()

    @app.post("/v1/actions/call")
    async def call(body: CallBody) -> dict[str, Any]:
        namespace, name, rest = body.ref.split("/", 2)
        action = rest.split("@", 1)[0]
        reply = await send_call(
            client,
            node=node,
            body={
                "call_id": f"tcall_floor_{os.getpid()}_{next(ids)}",
                "pack": f"{namespace}/{name}",
                "version": "1.0.0",
                "action": action,
                "cmd": ["/tool/bin/echo-tool", action],
                "timeout_ms": 10_000,
                "input": body.input,
            },
            timeout_s=15,
        )
        return {key: reply.result.get(key) for key in ("ok", "output", "timings")}

    return app


if __name__ == "__main__":
    port, node_url, node_id = sys.argv[1:4]
    node = NodeTarget(node_url, node_id, os.environ["B3OS_BENCH_NODE_KEY"])
    uvicorn.run(make_app(node), host="127.0.0.1", port=int(port), log_level="warning", http=BoundedHttp)

"""The floor of the api's CPU per noop call: a bare FastAPI app on uvicorn whose one route takes a call's
body (a pydantic model) and sends the node the request the api sends for it (`api.calls.nodeclient`:
signed, over the api's HTTP/1.1 client, the answer's proof checked), then answers the node's result. No
key, registry, input schema, limits, database or metering: what any api in this stack pays to pass a
call on to its node.

`bench goals` starts it as a process of its own (`python -m bench.api_floor PORT`, the node in
`B3OS_BENCH_NODE_URL`, `B3OS_BENCH_NODE_ID` and `B3OS_BENCH_NODE_KEY`, its call key) and times its CPU
per noop call beside the api's. It runs the api's HTTP protocol (`http1.server`).
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
from bench.echo_calls import echo_tool_call
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
        call_id = f"tcall_floor_{os.getpid()}_{next(ids)}"
        call = echo_tool_call(call_id, f"{namespace}/{name}", action, body.input)
        reply = await send_call(client, node=node, body=call, timeout_s=15)
        return {key: reply.result.get(key) for key in ("ok", "output", "timings")}

    return app


if __name__ == "__main__":
    env = os.environ
    node = NodeTarget(env["B3OS_BENCH_NODE_URL"], env["B3OS_BENCH_NODE_ID"], env["B3OS_BENCH_NODE_KEY"])
    port = sys.argv[1]
    uvicorn.run(make_app(node), host="127.0.0.1", port=int(port), log_level="warning", http=BoundedHttp)

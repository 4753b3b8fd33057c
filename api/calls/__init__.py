"""Action calls: `POST /v1/actions/call`, its limits, idempotency, metering, costs and earnings.

One module per concept, along the one call path (`service`):

- `request`: who calls, and the call and cancel bodies with their rules.
- `idempotency`: Idempotency-Key claims and stored answers.
- resolve and check: `api.registry.catalog` (the one rule of `packs.resolve`), `inputs` (input validation
  against `inputSchema`, schema defaults filled in), `files` (file values and their content types).
- admit: `limits` (calls at once, starts a minute, quotas, node slots).
- execute by kind: `executor` (the protocol), `vm` (on a node, through `nodeclient`), `http_action`
  (through the egress proxy, with `http_template`); `outputs` checks a tool's output; `cancel`.
- meter and answer: `answers` (the one answer shape), `metering`, `costs`, `earnings`, `sales`.
- `sessions`: the call path's database work; `settings`: its knobs; `errors`: the call error tree;
  `mcp_tools`: actions as MCP tools; `auth`: who may call; `wiring`: the service in the app.
"""

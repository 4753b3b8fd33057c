"""Action calls: `POST /v1/actions/call`, its limits, idempotency, metering, costs and earnings.

One module per concept:

- `errors`: the call error tree (code, status, reason, Retry-After).
- `files`: file values `{"$bytes", "name"}` and their content types.
- `inputs`: input validation against `inputSchema`, schema defaults filled in.
- `outputs`: the tool's output checked against `outputSchema` and `x-b3os-file.produces`.
- `costs`: integer micro-USD prices and the cost of one call.
- `earnings`: B3OS's cut of a publisher's sales and the monthly earnings report.
"""

"""The api's OpenAPI document (`GET /openapi.json`): what FastAPI builds from the routes, completed.

- Errors: a request that fails validation is answered 400 with the one error body (`ErrorBody`), so
  FastAPI's 422 validation response and its schemas are replaced by that 400. A 422 a route declares
  itself (`idempotency_key_reused`) stays. Each route declares its other statuses
  (`api.errors.error_responses`), with `Retry-After` on 429 and 503.
- Security: the HTTP bearer scheme `bearer` on every operation that can answer 401, which is every
  operation but `/healthz`, except a webhook delivery (`/v1/hooks/{id}`), whose signature authenticates
  it; so the docs page's Authorize button sends the key.
- Numbers: every integer a schema leaves unbounded is declared within +-(2^53 - 1), the range
  `api.jsonbody` accepts.
- Links: how an answer's ids feed the next request (a stored routine to its runs, a run to its cancel,
  a new key to its revocation...), for readers and for stateful clients such as schemathesis.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from api.jsonbody import MAX_SAFE_INTEGER

SECURITY_SCHEME = "bearer"
SIGNED_PREFIX = "/v1/hooks/"
"""Operations a signature authenticates, not a key (api.routes.triggers)."""
_VALIDATION_SCHEMAS = ("HTTPValidationError", "ValidationError")
_ERROR_BODY = {"$ref": "#/components/schemas/ErrorBody"}
_BODY = "$response.body#/"
# (from path, method, statuses, link name, to path, method, parameters)
LINKS: list[tuple[str, str, tuple[str, ...], str, str, str, dict[str, str]]] = [
    ("/v1/routines", "post", ("201",), "GetRoutine", "/v1/routines/{name}", "get", {"name": _BODY + "name"}),
    ("/v1/routines", "post", ("201",), "StartRun", "/v1/routines/{name}/runs", "post",
     {"name": _BODY + "name"}),
    ("/v1/routines/{name}/runs", "post", ("200", "201"), "GetRun", "/v1/runs/{run_id}", "get",
     {"run_id": _BODY + "run_id"}),
    ("/v1/routines/{name}/runs", "post", ("200", "201"), "CancelRun", "/v1/runs/{run_id}/cancel", "post",
     {"run_id": _BODY + "run_id"}),
    ("/v1/keys", "post", ("201",), "RevokeKey", "/v1/keys/{key_id}", "delete", {"key_id": _BODY + "id"}),
    ("/v1/connections", "post", ("201",), "RemoveConnection", "/v1/connections/{connection_id}", "delete",
     {"connection_id": _BODY + "id"}),
    ("/v1/actions/call", "post", ("200",), "CancelCall", "/v1/actions/calls/{call_id}/cancel", "post",
     {"call_id": _BODY + "call_id"}),
    ("/v1/actions/publishers/{namespace}/keys", "post", ("201",), "RevokeSigningKey",
     "/v1/actions/publishers/{namespace}/keys/{kid}", "delete",
     {"namespace": "$request.path.namespace", "kid": _BODY + "kid"}),
    ("/v1/actions/packs/{namespace}/{name}/versions", "get", ("200",), "GetManifest",
     "/v1/actions/packs/{namespace}/{name}/versions/{version}/manifest", "get",
     {"namespace": "$request.path.namespace", "name": "$request.path.name",
      "version": _BODY + "versions/0/version"}),
]  # fmt: skip


def openapi_document(app: FastAPI) -> dict[str, Any]:
    """The app's OpenAPI document, built once and then kept on the app."""
    if app.openapi_schema:
        return app.openapi_schema
    schema = get_openapi(title=app.title, version=app.version, routes=app.routes)
    components = schema.setdefault("components", {})
    components.setdefault("securitySchemes", {})[SECURITY_SCHEME] = {
        "type": "http",
        "scheme": "bearer",
        "description": "An API key (`b3_...`); the node routes take a node's own credential (`b3n_...`).",
    }
    for where, path in schema.get("paths", {}).items():
        for operation in path.values():
            responses = operation.get("responses", {})
            _validation_as_400(responses)
            if "401" in responses and not where.startswith(SIGNED_PREFIX):
                operation["security"] = [{SECURITY_SCHEME: []}]
    for name in _VALIDATION_SCHEMAS:
        components.get("schemas", {}).pop(name, None)
    _bound_integers(schema)
    _add_links(schema.get("paths", {}))
    app.openapi_schema = schema
    return schema


def _validation_as_400(responses: dict[str, Any]) -> None:
    validation = responses.get("422", {}).get("content", {}).get("application/json", {}).get("schema", {})
    if validation.get("$ref", "").rsplit("/", 1)[-1] not in _VALIDATION_SCHEMAS:
        return
    del responses["422"]
    responses.setdefault(
        "400",
        {
            "description": "invalid_request: a field or value is wrong (`field` names it)",
            "content": {"application/json": {"schema": _ERROR_BODY}},
        },
    )


def _add_links(paths: dict[str, Any]) -> None:
    for source, method, statuses, name, target, target_method, parameters in LINKS:
        responses = paths.get(source, {}).get(method, {}).get("responses", {})
        if target_method not in paths.get(target, {}):
            continue
        pointer = target.replace("~", "~0").replace("/", "~1")
        link = {"operationRef": f"#/paths/{pointer}/{target_method}", "parameters": parameters}
        for status in statuses:
            if status in responses:
                responses[status].setdefault("links", {})[name] = link


def _bound_integers(node: Any) -> None:
    if isinstance(node, list):
        for item in node:
            _bound_integers(item)
        return
    if not isinstance(node, dict):
        return
    if node.get("type") == "integer":
        if "maximum" not in node and "exclusiveMaximum" not in node:
            node["maximum"] = MAX_SAFE_INTEGER
        if "minimum" not in node and "exclusiveMinimum" not in node:
            node["minimum"] = -MAX_SAFE_INTEGER
    for value in node.values():
        _bound_integers(value)

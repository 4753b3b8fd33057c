"""Every api endpoint the SDK calls, as a function that builds its `ApiRequest` (no I/O but reading the
files a call sends): the one place that knows paths, bodies and which requests carry an Idempotency-Key.
"""

from __future__ import annotations

import base64
import hashlib
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from b3os._wire import ApiRequest, new_idempotency_key, segment

FileValue = bytes | os.PathLike[str] | tuple[str, bytes]
"""A file input: bytes (named after its field), a path (read, named after the file), or (name, bytes)."""


def _pack(namespace: str, name: str) -> str:
    return f"/v1/actions/packs/{segment(namespace)}/{segment(name)}"


# --- the registry -------------------------------------------------------------------------------------


def list_packs() -> ApiRequest:
    return ApiRequest("GET", "/v1/actions/packs", unwrap="packs")


def get_pack(namespace: str, name: str) -> ApiRequest:
    return ApiRequest("GET", _pack(namespace, name))


def list_versions(namespace: str, name: str) -> ApiRequest:
    return ApiRequest("GET", f"{_pack(namespace, name)}/versions", unwrap="versions")


def get_pack_manifest(namespace: str, name: str, version: str) -> ApiRequest:
    return ApiRequest("GET", f"{_pack(namespace, name)}/versions/{segment(version)}/manifest")


def list_tools(namespace: str, name: str, version: str | None) -> ApiRequest:
    return ApiRequest("GET", f"{_pack(namespace, name)}/tools", params={"version": version}, unwrap="tools")


def resolve(ref: str) -> ApiRequest:
    return ApiRequest("GET", "/v1/actions/resolve", params={"ref": ref})


def has_blob(sha256: str) -> ApiRequest:
    return ApiRequest("HEAD", f"/v1/actions/registry/blobs/sha256:{segment(sha256)}", expect="exists")


def upload_blob(data: bytes) -> ApiRequest:
    digest = hashlib.sha256(data).hexdigest()
    return ApiRequest("PUT", f"/v1/actions/registry/blobs/sha256:{digest}", content=data)


def publish(manifest: Mapping[str, Any], files: Sequence[Mapping[str, Any]]) -> ApiRequest:
    return ApiRequest("POST", "/v1/actions/packs", json={"manifest": dict(manifest), "files": list(files)})


def earnings(namespace: str, month: str | None) -> ApiRequest:
    path = f"/v1/actions/publishers/{segment(namespace)}/earnings"
    return ApiRequest("GET", path, params={"month": month})


def add_publisher(namespace: str, org_id: str | None) -> ApiRequest:
    body = {} if org_id is None else {"org_id": org_id}
    return ApiRequest("PUT", f"/v1/admin/publishers/{segment(namespace)}", json=body)


def add_signing_key(namespace: str, kid: str, public_key: str) -> ApiRequest:
    path = f"/v1/actions/publishers/{segment(namespace)}/keys"
    return ApiRequest("POST", path, json={"kid": kid, "public_key": public_key})


# --- calls --------------------------------------------------------------------------------------------


def file_value(field: str, value: FileValue) -> dict[str, str]:
    """The JSON value of a file input: `{"$bytes": <base64>, "name": <name>}`.

    Raises:
        TypeError: the value is not bytes, a path or a (name, bytes) pair.
        OSError: the path cannot be read.
    """
    if isinstance(value, bytes | bytearray | memoryview):
        name, data = field, bytes(value)
    elif isinstance(value, os.PathLike):
        path = Path(value)
        name, data = path.name, path.read_bytes()
    elif isinstance(value, tuple) and len(value) == 2 and isinstance(value[1], bytes | bytearray):
        name, data = str(value[0]), bytes(value[1])
    else:
        raise TypeError(f"files[{field!r}] must be bytes, a path or a (name, bytes) pair, not {type(value)}")
    return {"$bytes": base64.b64encode(data).decode("ascii"), "name": name}


def call(
    ref: str,
    input: Mapping[str, Any] | None,
    *,
    files: Mapping[str, FileValue] | None,
    idempotency_key: str | None,
    timeout_ms: int | None,
) -> ApiRequest:
    body: dict[str, Any] = {"ref": ref, "input": dict(input or {})}
    for field, value in (files or {}).items():
        body["input"][field] = file_value(field, value)
    if timeout_ms is not None:
        body["timeout_ms"] = timeout_ms
    key = idempotency_key or new_idempotency_key()
    return ApiRequest("POST", "/v1/actions/call", json=body, idempotency_key=key)


def cancel_call(*, call_id: str | None, idempotency_key: str | None) -> ApiRequest:
    if (call_id is None) == (idempotency_key is None):
        raise TypeError("cancel takes exactly one of call_id= and idempotency_key=")
    if call_id is not None:
        return ApiRequest("POST", f"/v1/actions/calls/{segment(call_id)}/cancel")
    return ApiRequest("POST", "/v1/actions/call/cancel", json={"idempotency_key": idempotency_key})


# --- routines and runs --------------------------------------------------------------------------------


def put_routine(yaml_text: str) -> ApiRequest:
    return ApiRequest("POST", "/v1/routines", json={"yaml": yaml_text})


def get_routine(name: str) -> ApiRequest:
    return ApiRequest("GET", f"/v1/routines/{segment(name)}")


def list_routines() -> ApiRequest:
    return ApiRequest("GET", "/v1/routines", unwrap="routines")


def run_routine(
    name: str,
    inputs: Mapping[str, Any] | None,
    *,
    idempotency_key: str | None,
    max_cost_microusd: int | None = None,
) -> ApiRequest:
    key = idempotency_key or new_idempotency_key()
    path = f"/v1/routines/{segment(name)}/runs"
    body: dict[str, Any] = {"inputs": dict(inputs or {})}
    if max_cost_microusd is not None:
        body["max_cost_microusd"] = max_cost_microusd
    return ApiRequest("POST", path, json=body, idempotency_key=key)


def estimate_routine(name: str, inputs: Mapping[str, Any] | None, *, yaml_text: str | None) -> ApiRequest:
    body: dict[str, Any] = {"inputs": dict(inputs or {})}
    if yaml_text is not None:
        body["yaml"] = yaml_text
    return ApiRequest("POST", f"/v1/routines/{segment(name)}/estimate", json=body)


def list_routine_versions(name: str) -> ApiRequest:
    return ApiRequest("GET", f"/v1/routines/{segment(name)}/versions", unwrap="versions")


def rerun(run_id: str, from_step: str | None, *, idempotency_key: str | None) -> ApiRequest:
    key = idempotency_key or new_idempotency_key()
    body = {"from": from_step} if from_step is not None else {}
    return ApiRequest("POST", f"/v1/runs/{segment(run_id)}/rerun", json=body, idempotency_key=key)


def _schedules(name: str) -> str:
    return f"/v1/routines/{segment(name)}/schedules"


def create_schedule(
    name: str, cron: str, *, timezone: str | None, inputs: Mapping[str, Any] | None, overlap: str | None
) -> ApiRequest:
    body: dict[str, Any] = {"cron": cron}
    if timezone is not None:
        body["timezone"] = timezone
    if inputs:
        body["inputs"] = dict(inputs)
    if overlap is not None:
        body["overlap"] = overlap
    return ApiRequest("POST", _schedules(name), json=body)


def list_schedules(name: str) -> ApiRequest:
    return ApiRequest("GET", _schedules(name), unwrap="schedules")


def delete_schedule(name: str, schedule_id: str) -> ApiRequest:
    return ApiRequest("DELETE", f"{_schedules(name)}/{segment(schedule_id)}", expect="empty")


def schedule_action(name: str, schedule_id: str, action: str) -> ApiRequest:
    return ApiRequest("POST", f"{_schedules(name)}/{segment(schedule_id)}/{action}")


def get_run(run_id: str, wait_s: float | None = None) -> ApiRequest:
    return ApiRequest("GET", f"/v1/runs/{segment(run_id)}", params={"wait_s": wait_s})


def list_runs(routine: str | None, limit: int | None) -> ApiRequest:
    return ApiRequest("GET", "/v1/runs", params={"routine": routine, "limit": limit}, unwrap="runs")


def cancel_run(run_id: str) -> ApiRequest:
    return ApiRequest("POST", f"/v1/runs/{segment(run_id)}/cancel")


# --- usage and connections ----------------------------------------------------------------------------


def usage(month: str | None) -> ApiRequest:
    return ApiRequest("GET", "/v1/usage", params={"month": month})


def add_connection(
    pack: str, connection: str, secret: str | Mapping[str, Any], params: Mapping[str, Any] | None
) -> ApiRequest:
    value = secret if isinstance(secret, str) else dict(secret)
    body: dict[str, Any] = {"pack": pack, "connection": connection, "secret": value}
    if params is not None:
        body["params"] = dict(params)
    return ApiRequest("POST", "/v1/connections", json=body)


def list_connections() -> ApiRequest:
    return ApiRequest("GET", "/v1/connections", unwrap="items")


def remove_connection(connection_id: str) -> ApiRequest:
    return ApiRequest("DELETE", f"/v1/connections/{segment(connection_id)}", expect="empty")


# --- triggers -----------------------------------------------------------------------------------------


def list_subscriptions(routine: str | None, ended: bool) -> ApiRequest:
    params: dict[str, str | int | float | None] = {"routine": routine, "ended": "true" if ended else None}
    return ApiRequest("GET", "/v1/triggers/subscriptions", params=params, unwrap="subscriptions")


def list_deliveries(subscription_id: str, limit: int) -> ApiRequest:
    path = f"/v1/triggers/subscriptions/{segment(subscription_id)}/deliveries"
    return ApiRequest("GET", path, params={"limit": limit}, unwrap="deliveries")


def replay_delivery(subscription_id: str, delivery_id: str) -> ApiRequest:
    path = f"/v1/triggers/subscriptions/{segment(subscription_id)}/replays"
    return ApiRequest("POST", path, json={"delivery_id": delivery_id})

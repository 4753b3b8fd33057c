"""A call's request: who calls (`Caller`), and the bodies of `POST /v1/actions/call` and of its cancel
(`CallBody`, `CancelBody`: the one place of their rules, which the routes declare and every surface's
call is checked by).

A body that breaks a rule is `400 invalid_request` naming the field at fault (`field`) and, where it
helps, the value sent; never a 5xx.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, StrictInt, StrictStr, ValidationError

from api.calls.errors import CallInvalid
from api.calls.idempotency import MAX_KEY_LENGTH, check_key
from api.numbers import integral
from packs.refs import MAX_REF_LENGTH, REF_PATTERN, ActionRef
from packs.resolve import ResolveError
from packs.resolve import parse_ref as parse_action_ref

_REF_REQUIRED = "the field ref is required: an action ref such as com.example.tools/echo/echo@1"


@dataclass(frozen=True)
class Caller:
    """Who calls: the key the call is metered under, and the surface it came through.

    `run_key` is set for a routine step's call (api.runs.grants): the one Idempotency-Key it may use, and
    `run_ref` the one ref it may call (None: any, for a grant minted before steps were bound); `run_id`,
    `run_step` (`<step id>` or `<step id>/<index>`) and `run_max_cost` (its max_cost_microusd, if any) name
    the run and what its calls may cost in all.
    """

    org_id: str
    key_id: str
    spend_cap_microusd: int | None = None
    surface: str = "http"
    run_key: str | None = None
    run_ref: str | None = None
    run_id: str | None = None
    run_step: str | None = None
    run_max_cost: int | None = None


class CallBody(BaseModel):
    """The request: an action ref, its input, and optionally the caller's time limit."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={"examples": [{"ref": "com.example.tools/echo/echo@1", "input": {"text": "hi"}}]},
    )
    ref: StrictStr = Field(
        description="ns/pack/action@1 (newest 1.x.y installed) or @1.0.0 (exact)",
        min_length=1,
        max_length=MAX_REF_LENGTH,
        pattern=REF_PATTERN,
    )
    input: dict[str, Any] = Field(
        default_factory=dict, description="checked against the action's inputSchema"
    )
    timeout_ms: Annotated[StrictInt, Field(ge=1), BeforeValidator(integral)] | None = Field(
        default=None, description="the caller's time limit in milliseconds"
    )

    def canonical(self) -> dict[str, Any]:
        """What identifies the request for Idempotency-Key."""
        return {"ref": self.ref, "input": self.input, "timeout_ms": self.timeout_ms}


class CancelBody(BaseModel):
    """Which call to cancel: the Idempotency-Key it was sent with."""

    model_config = ConfigDict(extra="forbid")
    idempotency_key: StrictStr = Field(
        description="the Idempotency-Key of the running call",
        min_length=1,
        max_length=MAX_KEY_LENGTH,
        pattern=r"^[ -~]*$",
    )


def parse_request(payload: Any) -> CallBody:
    """Check the request body `{"ref", "input", "timeout_ms"?}` by `CallBody`'s rules.

    Raises:
        CallInvalid: naming the field at fault.
    """
    try:
        return CallBody.model_validate(_object(payload))
    except ValidationError as exc:
        field_name = _at_fault(exc)
        value = payload.get(field_name)
        if field_name == "ref":
            if not isinstance(value, str) or not value:
                raise CallInvalid(_REF_REQUIRED, details={"field": "ref"}) from None
            parse_ref(value)  # its sentence says what is wrong with the ref
            raise CallInvalid(f"ref {value[:60]!r} is not an action ref", details={"field": "ref"}) from None
        if field_name == "input":
            raise CallInvalid(
                f"input must be a JSON object, not {type(value).__name__}", details={"field": "input"}
            ) from None
        if field_name == "timeout_ms":
            raise CallInvalid(
                f"timeout_ms must be a whole number of milliseconds of at least 1, not {value!r}",
                details={"field": "timeout_ms"},
            ) from None
        raise CallInvalid(
            f"the field {field_name} is not accepted here", details={"field": field_name}
        ) from None


def parse_cancel(payload: Any) -> str:
    """The Idempotency-Key of a cancel request body, by `CancelBody`'s rules.

    Raises:
        CallInvalid: naming the field at fault.
    """
    try:
        return CancelBody.model_validate(_object(payload)).idempotency_key
    except ValidationError as exc:
        field_name = _at_fault(exc)
        key = payload.get(field_name)
        if field_name != "idempotency_key":
            raise CallInvalid(
                f"the field {field_name} is not accepted here", details={"field": field_name}
            ) from None
        if not isinstance(key, str):
            raise CallInvalid(
                "the field idempotency_key is required: the Idempotency-Key the call was sent with",
                details={"field": "idempotency_key"},
            ) from None
        check_key(key)  # its sentence names what is wrong with the key
        raise CallInvalid(  # the model and check_key agree: only a rule one of them lacks comes here
            f"idempotency_key {key[:40]!r} is not an Idempotency-Key", details={"field": "idempotency_key"}
        ) from None


def parse_ref(text: Any) -> ActionRef:
    """Parse the request's `ref`, refusing a bad one with `400 invalid_request` naming it."""
    try:
        return parse_action_ref(text)
    except ResolveError as exc:
        raise CallInvalid(str(exc), details={"field": "ref"}) from None


def _object(payload: Any) -> dict[str, Any]:
    if not isinstance(payload, dict):
        raise CallInvalid("the request body must be a JSON object", details={"field": "body"})
    return payload


def _at_fault(exc: ValidationError) -> str:
    """The field of a body's first problem: a field not accepted first (by name), then the model's order."""
    errors = exc.errors()
    extra = sorted(str(e["loc"][0]) for e in errors if e["type"] == "extra_forbidden")
    return extra[0] if extra else str(errors[0]["loc"][0])

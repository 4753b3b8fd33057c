"""Typed models of b3pack.json (the declarative and the tool pack), for code that reads a checked manifest.

The publish checks (`packs.checks.run_checks`) work on the raw dict and word every refusal; these
models give typed access once a manifest has passed them (`parse_manifest`). Field names are the
manifest's camelCase names (`inputSchema`, `memoryMb`, `timeoutMs`), snake_case in Python.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel

from packs.errors import ManifestError
from packs.triggers import Trigger

DEFAULT_TIMEOUT_MS = 30_000


class _Model(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True)


class Publisher(_Model):
    id: str
    name: str


class Pricing(_Model):
    """{"model": "free"} or {"model": "per_call", "usd": "0.0001"}."""

    model: Literal["free", "per_call"]
    usd: str | None = None


class Effects(_Model):
    class_: Literal["read", "write", "pure"] = Field(alias="class")


HTTP_METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")
CONNECTION_KINDS = ("api_key", "bearer", "basic", "oauth2")


class HttpRequest(_Model):
    """The request template of an HTTP action; text values may hold `${{ }}` CEL expressions.

    `query` values and `headers` values are text templates; `body`, when present, is any JSON value
    (templates inside it keep their type when they are the whole value) sent as `application/json`.
    """

    method: Literal["GET", "POST", "PUT", "PATCH", "DELETE"]
    url: str
    query: dict[str, Any] = {}
    headers: dict[str, str] = {}
    body: Any = None


class HttpErrorRule(_Model):
    """One `response.errors[]` entry: when `when` (CEL) holds for a failed response, the pack's error."""

    when: str
    code: str
    message: str | None = None
    retryable: bool = False


class HttpResponse(_Model):
    """How a response becomes the output: `success` (CEL, default a 2xx status), `map` (default the
    body) and the pack's `errors`. `has_map` tells an absent map from a `null` one."""

    success: str | None = None
    map: Any = None
    errors: list[HttpErrorRule] = []

    @property
    def has_map(self) -> bool:
        """Whether the manifest gives a map (else the output is the response body)."""
        return "map" in self.model_fields_set


class HttpImpl(_Model):
    """A declarative HTTP action: the request template and how its response is read."""

    kind: Literal["http"]
    request: HttpRequest
    response: HttpResponse = HttpResponse()


class VmImpl(_Model):
    """A hosted tool action: the command run in the VM with the json-stdio protocol."""

    kind: Literal["vm"]
    protocol: Literal["json-stdio"]
    cmd: list[str]


class JsError(_Model):
    """An error a js action may throw: a thrown error whose `code` is this one becomes the pack's error."""

    code: str
    message: str | None = None
    retryable: bool = False


class JsImpl(_Model):
    """A JavaScript action: the exported function `export` of the module `entry` (a file under js/)."""

    kind: Literal["js"]
    entry: str
    export: str
    errors: list[JsError] = []


class Execution(_Model):
    timeout_ms: int = DEFAULT_TIMEOUT_MS


class Action(_Model):
    key: str
    title: str
    description: str
    input_schema: dict[str, Any]
    output_schema: dict[str, Any]
    effects: Effects
    impl: Annotated[HttpImpl | VmImpl | JsImpl, Field(discriminator="kind")]
    execution: Execution = Execution()
    pricing: Pricing | None = None
    connections: list[str] = []

    def file_fields(self, direction: Literal["input", "output"] = "input") -> list[str]:
        """Names of the top-level properties marked x-b3os-file in the input or output schema."""
        schema = self.input_schema if direction == "input" else self.output_schema
        props = schema.get("properties") or {}
        return [name for name, prop in props.items() if isinstance(prop, dict) and "x-b3os-file" in prop]


class Egress(_Model):
    host: str


def host_allowed(host: str, patterns: list[str] | tuple[str, ...]) -> bool:
    """Whether `host` (lowercase) matches one of `patterns`: an exact host or `*.example.com`, which
    matches any host under example.com but not example.com itself."""
    host = host.lower().rstrip(".")
    for pattern in patterns:
        if pattern.startswith("*."):
            if host.endswith(pattern[1:]) and len(host) > len(pattern) - 1:
                return True
        elif host == pattern:
            return True
    return False


class Connection(_Model):
    """A credential the pack's actions may require: `{"key", "kind", "title", "hosts", "params"?, "inject"?}`.

    `hosts` are the hosts the egress proxy adds the secret to (exact or `*.`, within `egress`);
    `params` is the JSON Schema of the connection's non-secret values; `inject` (api_key only) says
    where the key goes: `{"header": NAME}` or `{"query": NAME}`.
    """

    key: str
    kind: Literal["api_key", "bearer", "basic", "oauth2"]
    title: str
    hosts: list[str]
    params: dict[str, Any] | None = None
    inject: dict[str, str] | None = None


class ArchiveInfo(_Model):
    sha256: str
    bytes: int
    format: Literal["tar", "tar.gz"]
    unpacked_bytes: int
    entries: int


class ToolBundle(_Model):
    archive: ArchiveInfo


class ToolBase(_Model):
    name: str


class ToolSize(_Model):
    vcpu: int
    memory_mb: int


class Mode(_Model):
    mode: str


class Upstream(_Model):
    name: str
    license: str
    version: str | None = None
    url: str | None = None


class Tool(_Model):
    kind: Literal["cli"]
    base: ToolBase
    size: ToolSize | None = None
    bundle: ToolBundle
    runtime: Mode | None = None
    network: Mode | None = None
    upstream: list[Upstream] = []
    notices: str


class Signature(_Model):
    kid: str
    alg: Literal["ed25519"]
    hash: str
    value: str


class Manifest(_Model):
    """A whole b3pack.json."""

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True, protected_namespaces=()
    )
    pack: str
    version: str
    title: str
    description: str
    publisher: Publisher
    license: str
    engine: str
    egress: list[Egress] = []
    connections: list[Connection] = []
    actions: list[Action]
    triggers: list[Trigger] = []
    pricing: Pricing | None = None
    tool: Tool | None = None
    signature: Signature | None = None

    @property
    def namespace(self) -> str:
        """ "com.example.tools" of "com.example.tools/echo"."""
        return self.pack.partition("/")[0]

    @property
    def name(self) -> str:
        """ "echo" of "com.example.tools/echo"."""
        return self.pack.partition("/")[2]

    def action(self, key: str) -> Action | None:
        """The action of that key, or None."""
        return next((a for a in self.actions if a.key == key), None)

    def trigger(self, key: str) -> Trigger | None:
        """The trigger of that key, or None."""
        return next((t for t in self.triggers if t.key == key), None)

    def connection(self, key: str) -> Connection | None:
        """The connection of that key, or None."""
        return next((c for c in self.connections if c.key == key), None)

    @property
    def egress_hosts(self) -> list[str]:
        """The hosts of `egress`."""
        return [e.host for e in self.egress]


def parse_manifest(raw: Any) -> Manifest:
    """Model a manifest dict.

    Raises:
        ManifestError: naming every field pydantic refused, one per line.
    """
    try:
        return Manifest.model_validate(raw)
    except ValidationError as exc:
        lines = []
        for err in exc.errors():
            where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in err["loc"]).lstrip(".")
            lines.append(f"{where or 'manifest'}: {err['msg']}")
        raise ManifestError("the manifest does not match the b3pack.json model: " + "; ".join(lines)) from exc

"""Typed models of b3pack.json (the declarative and the tool pack), for code that reads a checked manifest.

The publish checks (`packs.checks.run_checks`) work on the raw dict and word every refusal; these
models give typed access once a manifest has passed them (`parse_manifest`). Field names are the
manifest's camelCase names (`inputSchema`, `memoryMb`, `timeoutMs`), snake_case in Python.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel

from packs.errors import ManifestError

DEFAULT_TIMEOUT_MS = 30_000
MICRO_PER_USD = 1_000_000


class _Model(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True)


class Publisher(_Model):
    id: str
    name: str


class Pricing(_Model):
    """{"model": "free"} or {"model": "per_call", "usd": "0.0001"}."""

    model: Literal["free", "per_call"]
    usd: str | None = None

    @property
    def micro_usd(self) -> int:
        """The price of one call in integer micro-USD (0 when free)."""
        if self.model == "free" or self.usd is None:
            return 0
        return int(Decimal(self.usd) * MICRO_PER_USD)


class Effects(_Model):
    class_: Literal["read", "write", "pure"] = Field(alias="class")


class HttpImpl(BaseModel):
    """A declarative HTTP action: request and response templates (kept as JSON)."""

    model_config = ConfigDict(extra="allow", frozen=True)
    kind: Literal["http"]
    request: dict[str, Any]
    response: dict[str, Any] | None = None


class VmImpl(_Model):
    """A hosted tool action: the command run in the VM with the json-stdio protocol."""

    kind: Literal["vm"]
    protocol: Literal["json-stdio"]
    cmd: list[str]


class Execution(_Model):
    timeout_ms: int = DEFAULT_TIMEOUT_MS


class Action(_Model):
    key: str
    title: str
    description: str
    input_schema: dict[str, Any]
    output_schema: dict[str, Any]
    effects: Effects
    impl: Annotated[HttpImpl | VmImpl, Field(discriminator="kind")]
    execution: Execution = Execution()
    pricing: Pricing | None = None
    connections: list[Any] | None = None

    def file_fields(self, direction: Literal["input", "output"] = "input") -> list[str]:
        """Names of the top-level properties marked x-b3os-file in the input or output schema."""
        schema = self.input_schema if direction == "input" else self.output_schema
        props = schema.get("properties") or {}
        return [name for name, prop in props.items() if isinstance(prop, dict) and "x-b3os-file" in prop]


class Egress(_Model):
    host: str


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
    connections: list[dict[str, Any]] = []
    actions: list[Action]
    triggers: list[dict[str, Any]] = []
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

    def price_micro_usd(self, key: str) -> int:
        """The price of one call of action `key` in micro-USD: its own pricing, else the pack's."""
        action = self.action(key)
        pricing = (action.pricing if action else None) or self.pricing
        return pricing.micro_usd if pricing else 0


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

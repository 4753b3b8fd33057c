"""Node settings: one pydantic-settings model read from `B3OS_*` environment variables."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from node.vm.host_share import HostShare

B3OS_HOME = Path.home() / ".b3os"


class Settings(BaseSettings):
    """The node worker's configuration (env prefix `B3OS_`)."""

    model_config = SettingsConfigDict(env_prefix="B3OS_", extra="ignore", hide_input_in_errors=True)

    node_credential: SecretStr = Field(
        default=SecretStr(""),
        description="This node's secret (b3os node credential issue NODE_ID); without it all is refused.",
    )
    node_id: str = Field(
        default="", description="Stable id of this node, the one its credential was issued for."
    )
    node_url: str = Field(
        default="", description="URL the api reaches this node at; empty: http://127.0.0.1:<port>."
    )
    api_url: str = Field(
        default="", description="The api's base URL for heartbeat and registry sync; empty: none."
    )
    base_dir: Path = Field(
        default=B3OS_HOME / "base", description="Where the base template rootfs is cached."
    )
    node_driver: Literal["sandbox", "microvm"] = Field(
        default="sandbox",
        description="How a hosted tool's call is isolated: sandbox (bubblewrap) or microvm (QEMU).",
    )
    guest_dir: Path = Field(
        default=B3OS_HOME / "guest", description="Where the microvm guest is built (b3os node build-guest)."
    )
    microvm_accel: Literal["auto", "kvm", "tcg"] = Field(
        default="auto", description="The microvm driver's accelerator: auto (KVM when a guest boots on it)."
    )
    microvm_pool_size: int = Field(
        default=2, ge=0, le=16, description="Booted microVMs kept ahead of calls (each used for one call)."
    )
    cache_dir: Path = Field(default=B3OS_HOME / "node" / "cache", description="The install cache of tools.")
    run_dir: Path = Field(
        default=Path("/run/b3os/vms"),
        description="VM directories; every parent must be searchable by the VMs' uids.",
    )
    slots: int = Field(default=8, ge=1, le=64, description="Calls at once on this node.")
    pool_size: int = Field(default=4, ge=0, le=16, description="VMs prepared ahead of calls.")
    vm_uid_base: int = Field(
        default=1_900_000_000,
        ge=1,
        le=2**32 - 2 - 96,  # room for the most uids a node holds: 64 slots, a pool of 16, 16 being removed
        description=(
            "First host uid/gid of the VMs: each live VM has its own, up to base+slots+pool_size+15"
            " (a used VM keeps its uid until it is removed)."
        ),
    )
    memory_mb: int = Field(default=512, ge=16, description="Memory of one VM, swap included.")
    vcpu: int = Field(default=1, ge=1, le=8, description="vCPUs of one VM (CFS quota).")
    pids_max: int = Field(default=64, ge=8, description="Processes and threads in one VM.")
    vm_weight: float = Field(
        default=HostShare.weight,
        ge=1,
        le=64,
        description="The VMs together weigh this many times another service of the host when CPU is busy.",
    )
    host_reserve_cpus: float = Field(
        default=HostShare.reserve_cpus,
        ge=0,
        description="CPUs the VMs never take together: the node and the host keep them (0: none).",
    )
    work_mb: int = Field(default=64, ge=1, description="Size of /work (tmpfs).")
    in_kb: int = Field(
        default=2048, ge=16, description="Size of /in (tmpfs); files that do not fit: tool_unavailable/copy."
    )
    out_kb: int = Field(
        default=1024, ge=256, description="Size of /out (tmpfs); files over 256 KiB in all are refused."
    )
    heartbeat_s: float = Field(
        default=3.0, gt=0, description="Seconds between heartbeats and registry syncs."
    )
    egress_url: str | None = Field(
        default=None,
        description="The egress proxy a js call's fetch requests are relayed to (none: refused).",
    )
    node_bin: Path = Field(default=Path("/usr/bin/node"), description="Node.js, the runtime of js actions.")


def get_settings() -> Settings:
    """Read the settings from the environment (a function so tests can build their own)."""
    return Settings()

"""How much of the host's CPU a node's VMs get together, whichever driver runs them (bwrap or microvm):
their weight against the host's other work and the CPUs they leave it (`B3OS_VM_WEIGHT`,
`B3OS_HOST_RESERVE_CPUS`; `node.vm.cgroups.NodeCgroups.weigh` applies them)."""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class HostShare:
    """The node's VMs together against the rest of the host (the node's own process, other services).

    A node host is there to run its VMs: when its CPU is contended they weigh `weight` times what a
    process session or another service weighs (a cgroup or an autogroup at its default), so a call's tool
    is not slowed by whatever else the host runs. Together they never use more than the host's CPUs less
    `reserve_cpus`: the node's own process (it starts, feeds and reaps the VMs) and the host keep that
    much whatever the tools do. Between tenants the runner's weights apply (one VM's weight a tenant).
    """

    weight: float = 8.0
    reserve_cpus: float = 0.5

    def cap_cpus(self, above: float | None = None) -> float | None:
        """The VMs' CPUs together: the host's (or `above`, a quota of a group above the node's, when fewer)
        less the reserve; None: no cap.

        Raises:
            ValueError: the reserve leaves the VMs less than a tenth of a CPU (the message says how much).
        """
        if self.reserve_cpus <= 0:
            return None
        cpus = float(len(os.sched_getaffinity(0)))
        if above is not None:
            cpus = min(cpus, above)
        if cpus - self.reserve_cpus < 0.1:
            raise ValueError(
                f"B3OS_HOST_RESERVE_CPUS={self.reserve_cpus:g} leaves the VMs no CPU of the {cpus:g} here: "
                f"give at most {cpus - 0.1:g} (0: no cap)"
            )
        return cpus - self.reserve_cpus

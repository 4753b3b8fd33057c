"""The node worker's errors, under one root, so that callers can catch everything it raises at once.

    NodeError
    ├── InvalidCall        a call the api sent cannot be run as given (node.runner)
    ├── VmError            a VM could not run a call: reason no_slot, copy, exec... (node.vm.base)
    ├── OutputFileError    a tool named an output file that cannot be read (node.vm.base)
    ├── SetupError         a sandbox could not be prepared (node.vm.bwrap_vm)
    ├── LauncherError      the VM launcher could not be built or started (node.vm.launcher)
    ├── MountError         a VM mount could not be made or removed (node.vm.mounts)
    ├── CgroupError        a call's cgroup could not be made, limited or removed (node.vm.cgroups)
    ├── CacheError         an install could not be written or read (node.cache)
    └── TemplateError      the base template could not be built (node.template)

The api never sees these: the node answers each call with its outcome (`docs/node.md`, Outcomes).
"""

from __future__ import annotations


class NodeError(Exception):
    """The root of every error the node worker raises."""

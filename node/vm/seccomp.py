"""The VMs' seccomp filter: a classic BPF program, built here (no libseccomp), given to bwrap `--seccomp FD`.

bwrap loads it (with `no_new_privs`) before it execs the sandbox's first program; every process of the VM
inherits it. Everything is allowed but:

- `add_key`, `request_key`, `keyctl`: EPERM (the kernel keyring's quotas are per host uid);
- `io_uring_setup`, `io_uring_enter`, `io_uring_register`: ENOSYS (a large kernel attack surface; programs
  fall back on ENOSYS);
- `userfaultfd`, `perf_event_open`, `bpf`: EPERM (kernel attack surface a tool does not need);
- `ptrace`, `process_vm_readv`, `process_vm_writev`: EPERM (no process of a VM may stop or read another);
- `socket`, `socketpair` of any family but AF_UNIX, AF_INET, AF_INET6: EAFNOSUPPORT (vsock, netlink, packet);
- every syscall of another ABI (x86 32-bit, x32): ENOSYS (its numbers, and `socketcall`, would pass the
  checks above).

Architectures: x86_64 and aarch64 (`FilterError` elsewhere).
"""

from __future__ import annotations

import errno
import platform
import struct
from dataclasses import dataclass

from node.errors import NodeError

# struct seccomp_data: int nr; __u32 arch; __u64 instruction_pointer; __u64 args[6]
_NR, _ARCH, _ARG0 = 0, 4, 16
_LD_ABS, _JEQ, _JGE, _RET = 0x20, 0x15, 0x35, 0x06  # BPF_LD|W|ABS, BPF_JMP|JEQ|K, BPF_JMP|JGE|K, BPF_RET|K
RET_ALLOW = 0x7FFF0000
RET_ERRNO = 0x00050000
X32_SYSCALL_BIT = 0x40000000
AF_UNIX, AF_INET, AF_INET6 = 1, 2, 10


class FilterError(NodeError):
    """No seccomp filter can be built for this machine's architecture."""


@dataclass(frozen=True)
class _Abi:
    audit_arch: int
    x32_bit: bool
    nr: dict[str, int]


_ABIS = {
    "x86_64": _Abi(
        0xC000003E,
        True,
        {
            "add_key": 248, "request_key": 249, "keyctl": 250,
            "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
            "userfaultfd": 323, "perf_event_open": 298, "bpf": 321,
            "ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311,
            "socket": 41, "socketpair": 53,
        },
    ),
    "aarch64": _Abi(
        0xC00000B7,
        False,
        {
            "add_key": 217, "request_key": 218, "keyctl": 219,
            "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
            "userfaultfd": 282, "perf_event_open": 241, "bpf": 280,
            "ptrace": 117, "process_vm_readv": 270, "process_vm_writev": 271,
            "socket": 198, "socketpair": 199,
        },
    ),
}  # fmt: skip

DENIED = {
    "add_key": errno.EPERM,
    "request_key": errno.EPERM,
    "keyctl": errno.EPERM,
    "io_uring_setup": errno.ENOSYS,
    "io_uring_enter": errno.ENOSYS,
    "io_uring_register": errno.ENOSYS,
    "userfaultfd": errno.EPERM,
    "perf_event_open": errno.EPERM,
    "bpf": errno.EPERM,
    "ptrace": errno.EPERM,
    "process_vm_readv": errno.EPERM,
    "process_vm_writev": errno.EPERM,
}
SOCKET_CALLS = ("socket", "socketpair")
SOCKET_FAMILIES = (AF_UNIX, AF_INET, AF_INET6)


def _insn(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k)


def build_filter(machine: str | None = None) -> bytes:
    """The filter as bwrap reads it: an array of `struct sock_filter`.

    Raises:
        FilterError: the architecture (default this machine's) is not one the filter knows.
    """
    arch = machine or platform.machine()
    abi = _ABIS.get(arch)
    if abi is None:
        raise FilterError(f"no seccomp filter for the {arch} architecture (x86_64 and aarch64 only)")
    prog = [
        _insn(_LD_ABS, _ARCH),
        _insn(_JEQ, abi.audit_arch, jt=1),
        _insn(_RET, RET_ERRNO | errno.ENOSYS),
        _insn(_LD_ABS, _NR),
    ]
    if abi.x32_bit:
        prog += [_insn(_JGE, X32_SYSCALL_BIT, jf=1), _insn(_RET, RET_ERRNO | errno.ENOSYS)]
    for name, err in DENIED.items():
        prog += [_insn(_JEQ, abi.nr[name], jf=1), _insn(_RET, RET_ERRNO | err)]
    families = len(SOCKET_FAMILIES)
    for name in SOCKET_CALLS:
        # not this call: skip its block (load, the family checks, two returns)
        prog.append(_insn(_JEQ, abi.nr[name], jf=families + 3))
        prog.append(_insn(_LD_ABS, _ARG0))  # the family: the low 32 bits of args[0] (an int)
        prog += [_insn(_JEQ, fam, jt=families - i) for i, fam in enumerate(SOCKET_FAMILIES)]
        prog += [_insn(_RET, RET_ERRNO | errno.EAFNOSUPPORT), _insn(_RET, RET_ALLOW)]
    prog.append(_insn(_RET, RET_ALLOW))
    return b"".join(prog)

"""The system-call filter of the sandbox: a classic BPF program for seccomp (x86_64).

Namespaces and mounts hide the host from tenant code; this filter closes the ways around
them that need no privilege at all, and the kernel interfaces that are shared host-wide:

* new namespaces of any kind (``unshare``, ``setns``, ``clone`` with a ``CLONE_NEW*``
  flag): an unprivileged user may create a user namespace and be root inside it, the
  first step of most container escapes; ``clone3`` answers ``ENOSYS`` (its flags are in
  memory, out of the filter's reach), so the C library falls back to ``clone``;
* the mount family, ``pivot_root``, ``chroot``, ``open_by_handle_at`` (reading files by
  handle, past every mount);
* the kernel keyrings (not namespaced: one tenant's keys are another's), ``bpf``,
  ``perf_event_open``, ``userfaultfd``, ``io_uring_*``, module and kexec loading, swap,
  ``reboot``, ``syslog``, ``acct``, ``quotactl``, clock setting;
* sockets of any family but the four a program needs (:data:`SOCKET_FAMILIES`: ``AF_UNIX``,
  ``AF_INET``, ``AF_INET6``, ``AF_NETLINK``), for ``socket`` and ``socketpair`` alike: the
  network namespace holds only its own loopback for those, while others reach past it
  (``AF_VSOCK`` talks to the hypervisor or the host's vsock services from any namespace;
  ``AF_PACKET``, ``AF_ALG``, ``AF_TIPC``... are kernel surface a model never needs);
* any other ABI than the native one (i386 and x32 system calls would bypass the numbers).

Refused calls fail with ``EPERM`` (a socket of a refused family with ``EAFNOSUPPORT``, what
a kernel without that family answers, so libraries fall back as they would there); the
tenant's code sees an ordinary error. On other
architectures no filter is built (:func:`program` returns None) and the sandbox runs on
namespaces alone. Standard library only.
"""

from __future__ import annotations

import errno
import platform
import struct

# classic BPF opcodes
_LD_W_ABS = 0x20  # BPF_LD | BPF_W | BPF_ABS
_JEQ_K = 0x15  # BPF_JMP | BPF_JEQ | BPF_K
_JGE_K = 0x35  # BPF_JMP | BPF_JGE | BPF_K
_JSET_K = 0x45  # BPF_JMP | BPF_JSET | BPF_K
_RET_K = 0x06  # BPF_RET | BPF_K

_ALLOW = 0x7FFF0000
_ERRNO = 0x00050000
_KILL_PROCESS = 0x80000000
_AUDIT_ARCH_X86_64 = 0xC000003E
_X32_BIT = 0x40000000

# offsets in struct seccomp_data: nr, arch, instruction_pointer, args[6] (little endian)
_NR, _ARCH, _ARG0_LOW = 0, 4, 16

# x86_64 system call numbers
REFUSED_X86_64: dict[str, int] = {
    "unshare": 272, "setns": 308, "mount": 165, "umount2": 166, "pivot_root": 155,
    "chroot": 161, "open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431,
    "fsmount": 432, "fspick": 433, "mount_setattr": 442, "open_by_handle_at": 304,
    "name_to_handle_at": 303, "keyctl": 250, "add_key": 248, "request_key": 249,
    "bpf": 321, "perf_event_open": 298, "userfaultfd": 323, "io_uring_setup": 425,
    "io_uring_enter": 426, "io_uring_register": 427, "kexec_load": 246,
    "kexec_file_load": 320, "init_module": 175, "finit_module": 313, "delete_module": 176,
    "swapon": 167, "swapoff": 168, "reboot": 169, "syslog": 103, "acct": 163,
    "quotactl": 179, "settimeofday": 164, "clock_settime": 227, "adjtimex": 159,
    "lookup_dcookie": 212, "vhangup": 153,
}  # fmt: skip
CLONE_X86_64, CLONE3_X86_64 = 56, 435
SOCKET_X86_64, SOCKETPAIR_X86_64 = 41, 53
# The socket families a sandbox may open (the first argument of socket and socketpair):
# local sockets (the API's socket, Python's multiprocessing), TCP/UDP on the sandbox's own
# loopback (Ray and gRPC inside it), and route netlink (getifaddrs, getaddrinfo).
SOCKET_FAMILIES: dict[str, int] = {"AF_UNIX": 1, "AF_INET": 2, "AF_INET6": 10, "AF_NETLINK": 16}
# CLONE_NEWNS | NEWCGROUP | NEWUTS | NEWIPC | NEWUSER | NEWPID | NEWNET | NEWTIME
CLONE_NEW_FLAGS = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000
CLONE_NEW_FLAGS |= 0x40000000 | 0x00000080


def _insn(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("<HBBI", code, jt, jf, k)


def program(machine: str | None = None) -> bytes | None:
    """The filter as bubblewrap's ``--seccomp`` reads it (``struct sock_filter`` array),
    or None where there is none for this architecture."""
    if (machine or platform.machine()) not in {"x86_64", "AMD64"}:
        return None
    deny = _ERRNO | errno.EPERM
    refused = sorted(REFUSED_X86_64.values())
    # Layout (jump offsets count the instructions skipped):
    #   0 ld arch; 1 jeq x86_64 ? 3 : 2; 2 ret kill
    #   3 ld nr; 4 jge x32 ? deny : next
    #   5.. one jeq per refused call -> deny
    #   then clone3 -> enosys, clone -> check flags, socket/socketpair -> check family,
    #   ret allow
    #   check flags: ld args[0]; jset NEW_FLAGS ? deny : allow
    #   check family: ld args[0]; one jeq per allowed family -> allow; ret EAFNOSUPPORT
    #   deny: ret EPERM; enosys: ret ENOSYS; allow: ret ALLOW
    body: list[tuple[int, int, str | None, str | None]] = []
    body.append((_LD_W_ABS, _ARCH, None, None))
    body.append((_JEQ_K, _AUDIT_ARCH_X86_64, "load_nr", "kill"))
    body.append((_RET_K, _KILL_PROCESS, None, None))
    labels = {"kill": 2, "load_nr": 3}
    body.append((_LD_W_ABS, _NR, None, None))
    body.append((_JGE_K, _X32_BIT, "deny", None))
    for number in refused:
        body.append((_JEQ_K, number, "deny", None))
    body.append((_JEQ_K, CLONE3_X86_64, "enosys", None))
    body.append((_JEQ_K, CLONE_X86_64, "check_clone", None))
    body.append((_JEQ_K, SOCKET_X86_64, "check_family", None))
    body.append((_JEQ_K, SOCKETPAIR_X86_64, "check_family", None))
    body.append((_RET_K, _ALLOW, None, None))
    labels["check_clone"] = len(body)
    body.append((_LD_W_ABS, _ARG0_LOW, None, None))
    body.append((_JSET_K, CLONE_NEW_FLAGS, "deny", "allow"))
    labels["check_family"] = len(body)
    body.append((_LD_W_ABS, _ARG0_LOW, None, None))
    for family in sorted(SOCKET_FAMILIES.values()):
        body.append((_JEQ_K, family, "allow", None))
    body.append((_RET_K, _ERRNO | errno.EAFNOSUPPORT, None, None))
    labels["deny"] = len(body)
    body.append((_RET_K, deny, None, None))
    labels["enosys"] = len(body)
    body.append((_RET_K, _ERRNO | errno.ENOSYS, None, None))
    labels["allow"] = len(body)
    body.append((_RET_K, _ALLOW, None, None))
    out = []
    for index, (code, k, true, false) in enumerate(body):
        jt = labels[true] - index - 1 if true else 0
        jf = labels[false] - index - 1 if false else 0
        out.append(_insn(code, k, jt, jf))
    return b"".join(out)

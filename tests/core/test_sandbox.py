"""The sandbox's mechanism: what goes on the command line and what does not, the shell's
reading of the environment, bubblewrap's exit statuses, the system-call filter."""

from __future__ import annotations

import os
import signal
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from deepedge.core import seccomp
from deepedge.core.sandbox import (
    Bind,
    SandboxSpec,
    _shell_assignments,
    exit_status,
    group_members,
    prepare,
)

SECRET = "dpe_secret-token-value"
SPEC = SandboxSpec(binds=(Bind("/usr", "/usr"),), cwd="/tmp", uid=200_123, gid=200_123)


def _args_of(prepared: object) -> list[str]:
    """The options bubblewrap reads from its ``--args`` descriptor."""
    argv = prepared.argv  # type: ignore[attr-defined]
    fd = int(argv[argv.index("--args") + 1])
    os.lseek(fd, 0, os.SEEK_SET)
    return os.read(fd, 1 << 20).decode().split("\0")[:-1]


def test_secrets_and_binds_never_reach_the_hosts_process_list() -> None:
    prepared = prepare(SPEC, ["python", "-c", "pass"], {"DEEPEDGE_TOKEN": SECRET})
    try:
        visible = " ".join(prepared.argv)
        assert SECRET not in visible and "/usr" not in visible.split("--")[0]
        options = _args_of(prepared)
        assert "--unshare-net" in options and "--unshare-pid" in options
        assert "--clearenv" in options
        assert prepared.argv[-3:] == ["python", "-c", "pass"]
    finally:
        prepared.close()


def test_a_root_starter_switches_user_and_keeps_the_environment_from_privileged_steps() -> None:
    """As root, bubblewrap and setpriv see no variable of the tenant's (an LD_PRELOAD there
    would run tenant code as root); the environment is a read-only file of the sandbox."""
    if os.geteuid() != 0:
        pytest.skip("the privileged start is root's")
    prepared = prepare(SPEC, ["true"], {"LD_PRELOAD": "/x.so", "A": "1"})
    try:
        options = _args_of(prepared)
        assert options[options.index("--setenv") + 1 : options.index("--setenv") + 3] == [
            "PATH", "/usr/sbin:/usr/bin:/sbin:/bin"]  # fmt: skip
        assert options.count("--setenv") == 1  # PATH only
        assert "setpriv" in prepared.argv and "--reuid=200123" in prepared.argv
        assert "--bounding-set=-all" in prepared.argv
    finally:
        prepared.close()


@pytest.mark.parametrize(
    "value",
    ["plain", "it's", 'say "hi"', "$(touch /tmp/pwned)", "`id`", "a\nb", "\\", "$HOME", ""],
)
def test_the_environment_file_is_data_never_code(tmp_path: Path, value: str) -> None:
    env_file = tmp_path / "environment"
    env_file.write_text(_shell_assignments({"VALUE": value, "OTHER": "x"}))
    marker = tmp_path / "ran"
    script = f'set -a; . {env_file}; printf %s "$VALUE"'
    out = subprocess.run(["/bin/sh", "-c", script], capture_output=True, text=True,
                         env={"PATH": "/usr/bin:/bin"}, check=True)  # fmt: skip
    assert out.stdout == value
    assert not marker.exists() and not Path("/tmp/pwned").exists()


@pytest.mark.parametrize("name", ["1A", "A-B", "A B", "A=B", ""])
def test_bad_variable_names_are_refused(name: str) -> None:
    with pytest.raises(ValueError):
        _shell_assignments({name: "x"})


@pytest.mark.parametrize(
    ("code", "expected"),
    [(0, (0, None)), (3, (3, None)), (137, (137, 9)), (143, (143, 15)),
     (-9, (137, 9)), (128, (128, None)), (255, (255, None))],
)  # fmt: skip
def test_bubblewraps_exit_statuses_name_the_signal(code: int, expected: tuple) -> None:
    assert exit_status(code) == expected


def test_process_groups_are_read_from_proc() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"],
                             process_group=0)  # fmt: skip
    try:
        assert group_members(child.pid) == [child.pid]
        assert os.getpid() not in group_members(child.pid)
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()


def test_the_filter_is_a_bpf_program_that_refuses_namespaces_on_x86_64() -> None:
    program = seccomp.program("x86_64")
    assert program is not None and len(program) % 8 == 0
    instructions = [struct.unpack("<HBBI", program[i : i + 8]) for i in range(0, len(program), 8)]
    assert instructions[0] == (0x20, 0, 0, 4)  # load the architecture first
    constants = {k for _, _, _, k in instructions}
    assert {seccomp.REFUSED_X86_64["unshare"], seccomp.REFUSED_X86_64["setns"],
            seccomp.CLONE_X86_64, seccomp.CLONE_NEW_FLAGS} <= constants  # fmt: skip
    for index, (code, jt, jf, _k) in enumerate(instructions):
        if code & 0x07 == 0x05:  # a jump lands on an instruction of the program
            assert index + 1 + max(jt, jf) < len(instructions)
    assert instructions[-1][0] == 0x06  # it ends in a return
    assert seccomp.program("aarch64") is None


# A child that installs the filter on itself (no new privileges, then seccomp) and opens
# one socket: what the kernel answers a sandboxed program, without bubblewrap.
OPEN_SOCKET_UNDER_THE_FILTER = """
import ctypes, socket, sys
program = open(sys.argv[1], "rb").read()
libc = ctypes.CDLL(None, use_errno=True)
class Fprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]
buffer = ctypes.create_string_buffer(program, len(program))
fprog = Fprog(len(program) // 8, ctypes.cast(buffer, ctypes.c_void_p))
assert libc.prctl(38, 1, 0, 0, 0) == 0  # PR_SET_NO_NEW_PRIVS
assert libc.prctl(22, 2, ctypes.byref(fprog), 0, 0) == 0  # PR_SET_SECCOMP, FILTER
family, kind, pair = int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "pair"
try:
    for s in (socket.socketpair(family, kind) if pair else [socket.socket(family, kind)]):
        s.close()
    print(0)
except OSError as e:
    print(e.errno)
"""


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="the filter is built for x86_64")
@pytest.mark.parametrize(
    ("family", "kind", "call", "errno_seen"),
    [
        ("AF_VSOCK", "SOCK_STREAM", "socket", 97),  # the hypervisor's and host's vsock
        ("AF_PACKET", "SOCK_RAW", "socket", 97),  # root could open it without the filter
        ("AF_ALG", "SOCK_SEQPACKET", "socket", 97),
        ("AF_UNIX", "SOCK_STREAM", "socket", 0),
        ("AF_UNIX", "SOCK_STREAM", "pair", 0),
        ("AF_INET", "SOCK_STREAM", "socket", 0),
        ("AF_INET", "SOCK_DGRAM", "socket", 0),
        ("AF_INET6", "SOCK_STREAM", "socket", 0),
        ("AF_NETLINK", "SOCK_DGRAM", "socket", 0),
    ],
)
def test_the_filter_allows_only_the_socket_families_a_program_needs(
    tmp_path: Path, family: str, kind: str, call: str, errno_seen: int
) -> None:
    import socket

    program = seccomp.program("x86_64")
    assert program is not None
    path = tmp_path / "filter.bpf"
    path.write_bytes(program)
    number = getattr(socket, family)
    assert (number in seccomp.SOCKET_FAMILIES.values()) == (errno_seen == 0)
    done = subprocess.run(
        [sys.executable, "-c", OPEN_SOCKET_UNDER_THE_FILTER, str(path), str(number),
         str(getattr(socket, kind)), call],
        capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert int(done.stdout.strip()) == errno_seen

"""The service's start: it refuses to run tenant code unsandboxed unless told, and says so in
one line; a port still held is named in one line too."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from deepedge.api import server
from deepedge.core.errors import ConflictError, DependencyUnavailableError
from deepedge.service.config import ServiceSettings
from deepedge.service.sandbox import Isolation


@pytest.mark.parametrize(
    ("isolation", "tool_found", "refused"),
    [(Isolation.SANDBOX, True, False), (Isolation.SANDBOX, False, True),
     (Isolation.TRUSTED, False, False), (Isolation.TRUSTED, True, False)],
)  # fmt: skip
def test_without_bubblewrap_only_trusted_tenants_may_run(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    isolation: Isolation,
    tool_found: bool,
    refused: bool,
) -> None:
    import deepedge.service.sandbox as policy

    real_which = policy.shutil.which
    monkeypatch.setattr(policy.shutil, "which",
                        lambda name: real_which(name) if tool_found else None)  # fmt: skip
    settings = ServiceSettings(data_dir=tmp_path / "data", isolation=isolation)
    if refused:
        with pytest.raises(DependencyUnavailableError) as info:
            server.refuse_unsandboxed(settings)
        assert "--trusted-tenants" in info.value.message and "\n" not in info.value.message
    else:
        server.refuse_unsandboxed(settings)


def test_a_port_in_use_is_one_line_not_a_traceback(tmp_path: Path) -> None:
    holder = socket.create_server(("127.0.0.1", 0))
    port = holder.getsockname()[1]
    try:
        with pytest.raises(ConflictError, match=f"port {port}"):
            server._listen("127.0.0.1", port, wait_s=0.3)
        done = subprocess.run(
            [sys.executable, "-m", "deepedge.api.server", "--data-dir", str(tmp_path / "d"),
             "--port", str(port)],
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
    finally:
        holder.close()
    assert done.returncode == ConflictError.exit_code
    assert done.stderr.strip().startswith("error: port") and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


# Imported by the service's start but used only by an export or a verdict: every start of
# the service (and every test that starts one) would pay seconds of CPU for them.
NOT_AT_START = ("torch", "scipy.stats")


def test_the_service_starts_without_torch_or_scipy_stats() -> None:
    loaded = subprocess.run(
        [sys.executable, "-c", "import sys, deepedge.api.server, deepedge.cli.service; "
         f"print([m for m in {NOT_AT_START!r} if m in sys.modules])"],
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    assert loaded.stdout.strip() == "[]"

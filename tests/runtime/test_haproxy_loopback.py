"""HAProxy's stats page and Prometheus exporter rewritten onto loopback before HAProxy
starts, the ingress left where the operator put it; a configuration this does not know is
refused rather than served open."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from deepedge.runtime.serving.haproxy_loopback import (
    UnknownConfigError,
    config_argument,
    loopback_config,
    wrapper_env,
)

CONFIG = """global
    stats socket /tmp/x/admin.sock mode 666 level admin expose-fd listeners
defaults
    mode http
frontend prometheus
    bind {metrics}
    http-request use-service prometheus-exporter if {{ path /metrics }}
frontend http_frontend
    bind {ingress}
backend model-acme.cam
    server r1 127.0.0.1:30001 check
listen stats
  bind {stats}
  stats enable
"""


def _config(metrics: str = ":9101", stats: str = "*:8404", ingress: str = "*:8000") -> str:
    return CONFIG.format(metrics=metrics, stats=stats, ingress=ingress)


@pytest.mark.parametrize(
    ("metrics", "stats"),
    [(":9101", "*:8404"), ("0.0.0.0:9101", "[::]:8404"), ("127.0.0.1:9101", ":8404"),
     (":9101 name prom", "*:8404")],
)  # fmt: skip
def test_the_stats_and_exporter_listen_on_loopback_and_the_ingress_stays(
    metrics: str, stats: str
) -> None:
    fixed = loopback_config(_config(metrics, stats))
    binds = [line.strip() for line in fixed.splitlines() if line.strip().startswith("bind")]
    tail = " name prom" if "name" in metrics else ""
    assert binds == [f"bind 127.0.0.1:9101{tail}", "bind *:8000", "bind 127.0.0.1:8404"]
    assert loopback_config(fixed) == fixed  # a second pass changes nothing


@pytest.mark.parametrize(
    "config",
    [
        _config(stats="192.0.2.2:8404"),  # an address this module would not choose to keep
        _config(metrics="unix@/tmp/metrics.sock"),
        _config().replace("  bind *:8404\n", ""),  # a stats section without its bind
    ],
)
def test_a_configuration_it_does_not_know_is_refused(config: str) -> None:
    with pytest.raises(UnknownConfigError):
        loopback_config(config)


def test_rays_template_binds_what_this_module_rewrites() -> None:
    """Ray's own template (the one Serve renders): its stats and exporter sections bind the
    forms handled above, so a Ray upgrade that changes them fails here first."""
    from ray.serve._private.haproxy_templates import HAPROXY_CONFIG_TEMPLATE as template

    rendered = template.replace("{{ config.metrics_port }}", "9101").replace(
        "{{ config.stats_port }}", "8404"
    )
    sections: dict[str, list[str]] = {"frontend prometheus": [], "listen stats": []}
    current = ""
    for line in rendered.splitlines():
        if not line.startswith((" ", "\t")) and line.strip():
            current = " ".join(line.split()[:2])
        elif current in sections and line.strip().startswith("bind"):
            sections[current].append(line.strip())
    assert sections == {"frontend prometheus": ["bind :9101"], "listen stats": ["bind *:8404"]}


def test_the_wrapper_rewrites_the_file_then_runs_the_real_binary(tmp_path: Path) -> None:
    config = tmp_path / "haproxy.cfg"
    config.write_text(_config())
    env = wrapper_env(tmp_path, haproxy="/bin/echo")  # "HAProxy" prints its arguments
    script = Path(env["RAY_SERVE_HAPROXY_BINARY_PATH"])
    done = subprocess.run([str(script), "-db", "-f", str(config), "-sf", "42"],
                          capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["-db", "-f", str(config), "-sf", "42"]  # Serve's own
    assert "bind 127.0.0.1:8404" in config.read_text()
    config.write_text(_config(stats="192.0.2.2:8404"))
    refused = subprocess.run([str(script), "-db", "-f", str(config)], capture_output=True,
                             text=True, timeout=60, check=False)  # fmt: skip
    assert refused.returncode == 2 and refused.stdout == ""  # never ran
    assert "HAProxy not started" in refused.stderr and "192.0.2.2:8404" in refused.stderr


@pytest.mark.parametrize(
    ("args", "expected"),
    [(["-db", "-f", "/a.cfg"], "/a.cfg"), (["-f", "/b.cfg", "-dR", "-sf", "1"], "/b.cfg")],
)
def test_the_configuration_is_found_on_haproxys_command_line(
    args: list[str], expected: str
) -> None:
    assert config_argument(args) == Path(expected)
    with pytest.raises(UnknownConfigError):
        config_argument(["-db"])


def test_haproxy_dies_with_the_process_that_started_it(tmp_path: Path) -> None:
    """Serve's HAProxy manager killed (here: a parent that exits at once) takes HAProxy
    (here: a script that sleeps) with it."""
    import os
    import sys
    import time

    config = tmp_path / "haproxy.cfg"
    config.write_text(_config())
    fake = tmp_path / "fake-haproxy"
    fake.write_text("#!/bin/sh\nexec sleep 60\n")
    fake.chmod(0o755)
    script = wrapper_env(tmp_path, haproxy=str(fake))["RAY_SERVE_HAPROXY_BINARY_PATH"]
    parent = (
        "import subprocess, sys, time\n"
        f"child = subprocess.Popen([{script!r}, '-db', '-f', {str(config)!r}],\n"
        "                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
        "print(child.pid, flush=True)\n"
        "time.sleep(3)\n"  # the wrapper has rewritten the file and exec'd by then
    )
    done = subprocess.run([sys.executable, "-c", parent], capture_output=True, text=True,
                          timeout=60, check=True)  # fmt: skip
    pid = int(done.stdout.split()[0])

    def gone() -> bool:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        with open(f"/proc/{pid}/stat") as stat:  # a zombie is gone too
            return stat.read().split(")")[-1].split()[0] == "Z"

    deadline = time.monotonic() + 10
    while not gone() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert gone(), f"the fake HAProxy {pid} outlived the process that started it"

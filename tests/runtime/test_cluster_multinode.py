"""A real multi-node Ray cluster on this machine: agents, live planning, node loss.

The fixture starts a head and three raylets (``ray start``, each on its own loopback
address, ports and temp dir, with its ``deepedge-node:`` resource and one CPU), an agent
per node (n1's through the ``deepedge agent`` command), and tears it all down, also when
a test fails. The tests run in order on the same cluster: the node-loss tests stop
raylets for good.
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from _support import wait_until
from deepedge.cluster.devices import AppKind, DeviceType
from deepedge.cluster.reports import NodeStatus
from deepedge.learning.convergence import StoppingRule
from deepedge.learning.models import get_flat_weights, make_edge_model
from deepedge.learning.stream import load_digits_images
from deepedge.runtime.training.monitor import PARAMETER_SERVER_ID, FailureKind, UpdateEvent
from deepedge.runtime.training.update import UpdateConfig, UpdateResult, run_model_update

pytestmark = [pytest.mark.ray, pytest.mark.slow]

WORKERS = ("n1", "n2", "n3")
HEARTBEAT_S = 0.5
LOST_AFTER_S = 2.0
# Ray counts a silent raylet dead after this many missed health checks of the head, one
# period apart (Ray's own: 5 x 3 s). A killed raylet's port is closed, so each check fails
# at once; a slow raylet still has Ray's 10 s per check. The tests wait on that count (a
# lost node's actors end, its rejoin needs it dead), never on Ray's own pace.
FAST_NODE_DEATH = {"RAY_health_check_period_ms": "1000", "RAY_health_check_failure_threshold": "3"}
tiny_factory = functools.partial(make_edge_model, 10, 8, 2, 0)


class Site:
    """The running cluster and the handles the tests need."""

    def __init__(self, cluster: object, agent_cli: subprocess.Popen[bytes]) -> None:
        from deepedge.runtime.cluster.local_cluster import LocalRayCluster

        assert isinstance(cluster, LocalRayCluster)
        self.cluster = cluster
        self.agent_cli = agent_cli
        digits = load_digits_images(8)
        self.data = (digits.images[:160], digits.labels[:160])

    def update(
        self, ps_node: str, ps_candidates: tuple[str, ...], workers: tuple[str, ...], **kw: object
    ) -> UpdateResult:
        from deepedge.runtime.cluster.live_cluster import LiveCluster, live_planner

        live = LiveCluster(ps_node=ps_node, ps_candidates=ps_candidates, workers=workers)
        cluster = live.spec(len(self.data[1]))
        epochs = int(kw.pop("epochs", 3))  # type: ignore[call-overload]
        return run_model_update(
            cluster,
            self.data,
            self.data,
            tiny_factory,
            get_flat_weights(tiny_factory()),
            Path(kw.pop("checkpoint_dir")),  # type: ignore[arg-type]
            planner=live_planner(),
            live=live,
            config=UpdateConfig(
                time_scale=0.0,
                stopping=StoppingRule(min_epochs=epochs, max_epochs=epochs),
                min_epoch_timeout_s=300.0,
            ),
            **kw,  # type: ignore[arg-type]
        )


@pytest.fixture(scope="module")
def site() -> Iterator[Site]:
    import ray

    from deepedge.runtime.cluster.local_cluster import LocalRayCluster
    from deepedge.runtime.cluster.node_agent import start_agent
    from deepedge.runtime.cluster.session import ensure_ray

    if ray.is_initialized():
        ray.shutdown()
    cluster = LocalRayCluster(worker_ids=WORKERS, cpus_per_node=1, extra_env=FAST_NODE_DEATH)
    agent_cli: subprocess.Popen[bytes] | None = None
    try:
        cluster.start()
        # n1's agent is the real command; the others are started from here (same actor)
        agent_cli = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "deepedge",
                "agent",
                "--address",
                cluster.address,
                "--id",
                "n1",
                "--device-type",
                "raspberry-pi-4",
                "--app",
                "sift:1.0:camera",
                "--heartbeat-s",
                str(HEARTBEAT_S),
                "--lost-after-s",
                str(LOST_AFTER_S),
                "--no-join",
            ]
        )
        ensure_ray(address=cluster.address)
        # keep the handles: an actor whose last handle goes away is stopped
        agents = [
            start_agent(node, DeviceType.RASPBERRY_PI_4, (), HEARTBEAT_S, LOST_AFTER_S)
            for node in ("head", "n2", "n3")
        ]
        from deepedge.runtime.cluster.live_cluster import LiveCluster

        LiveCluster().wait_for(("head", *WORKERS), timeout_s=180)
        yield Site(cluster, agent_cli)
        del agents
    finally:
        if ray.is_initialized():
            ray.shutdown()
        if agent_cli is not None:
            agent_cli.terminate()
            try:
                agent_cli.wait(timeout=30)
            except subprocess.TimeoutExpired:
                agent_cli.kill()
        cluster.stop()


def _until_lost(node_id: str) -> None:
    """Block (in the update's event callback) until the registry has lost ``node_id``."""
    from deepedge.runtime.cluster.live_cluster import LiveCluster

    live = LiveCluster()
    assert wait_until(lambda: bool(live.lost([node_id])), 120, interval_s=0.1), (
        f"{node_id} was never marked lost"
    )


def test_agents_report_measured_state_and_apps(site: Site) -> None:
    from deepedge.runtime.cluster.live_cluster import LiveCluster

    reports = {r.node_id: r for r in LiveCluster().alive()}
    assert set(reports) == {"head", *WORKERS}
    assert len({r.ray_node_id for r in reports.values()}) == 4  # one Ray node each
    for r in reports.values():
        assert 0.0 <= r.state.cpu_util <= 1.0 and 0.0 < r.state.mem_util <= 1.0
        assert r.state.gpu_util is None  # no GPU here: absent, not 0
        assert r.mem_total_mb > 0 and r.seq >= 1
    (app,) = reports["n1"].apps
    assert (app.name, app.kind, app.deadline_s) == ("camera", AppKind.SIFT, 1.0)
    import json

    from typer.testing import CliRunner

    from deepedge.cli import app

    listed = CliRunner().invoke(app, ["nodes", "--address", site.cluster.address, "-o", "json"])
    assert listed.exit_code == 0, listed.output
    nodes = {n["node_id"]: n for n in json.loads(listed.stdout)}
    table = CliRunner().invoke(app, ["nodes", "--address", site.cluster.address]).stdout
    assert table.split()[:4] == ["NODE", "DEVICE", "STATUS", "LAST"]
    assert {line.split()[0] for line in table.splitlines()[1:]} == set(reports)
    assert {k: v["status"] for k, v in nodes.items()} == dict.fromkeys(reports, "alive")
    assert nodes["n1"]["apps"][0]["deadline_s"] == 1.0
    unknown = CliRunner().invoke(
        app, ["profile-node", "--id", "nowhere", "--out", "m", "--address", site.cluster.address]
    )
    assert unknown.exit_code == 4 and "no agent runs for node 'nowhere'" in unknown.output
    spec = LiveCluster(ps_node="head").spec(100)
    assert spec.parameter_server.node == "head"
    assert [w.id for w in spec.workers] == list(WORKERS)
    assert spec.workers[0].background_apps[0].deadline_s == 1.0


def test_every_raylet_carries_its_deepedge_node_label(site: Site) -> None:
    import ray

    labels = [n["Labels"] for n in ray.nodes() if n["Alive"]]
    assert sorted(x.get("deepedge.node-id", "") for x in labels) == ["head", *WORKERS]


def test_a_second_agent_with_a_taken_id_exits_5_with_one_line(site: Site) -> None:
    """n2's agent runs: another `deepedge agent --id n2` is refused (no raylet started:
    n2's resource is there, so it does not join), with one line and no traceback."""
    command = [sys.executable, "-m", "deepedge", "agent", "--address", site.cluster.address,
               "--id", "n2", "--device-type", "raspberry-pi-4"]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=180, check=False)
    assert done.returncode == 5, done.stderr
    lines = [x for x in done.stderr.splitlines() if "already registered" in x]
    assert len(lines) == 1 and "Traceback" not in done.stderr
    assert lines[0].startswith("error: node n2 is already registered by an agent on host ")
    assert "pick another --id or stop that agent" in lines[0]


def test_a_ps_node_that_is_not_alive_is_refused_by_the_cli_and_a_job(
    site: Site, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from typer.testing import CliRunner

    from deepedge.cli import app
    from deepedge.core.errors import InvalidInputError
    from deepedge.service.learner import ModelUpdateSpec, _run_workload_update

    args = ["update", "--workload", "digits", "--address", site.cluster.address]
    result = CliRunner().invoke(app, [*args, "--ps-node", "nano-9", "--out", str(tmp_path)])
    assert result.exit_code == 2, result.output
    assert "node 'nano-9'" in result.output and "alive: head, n1, n2, n3" in result.output
    monkeypatch.setenv("DEEPEDGE_CHECKPOINT_DIR", str(tmp_path))
    spec = ModelUpdateSpec(workload="digits", live_cluster=True, ps_node="nano-9", epochs=1)
    with pytest.raises(InvalidInputError, match="alive: head, n1, n2, n3"):
        _run_workload_update(spec)


def test_an_update_planned_from_reports_runs_its_workers_on_their_nodes(
    site: Site, tmp_path: Path
) -> None:
    from deepedge.runtime.cluster.live_cluster import LiveCluster

    result = site.update("head", ("head",), WORKERS, checkpoint_dir=tmp_path)
    ray_node = {r.node_id: r.ray_node_id for r in LiveCluster().alive()}
    assert not result.emulated and result.failures == ()
    assert len(result.accuracies) == 3
    selected = result.plan.selected_ids
    assert selected and set(selected) <= set(WORKERS)
    (where,) = result.placements
    assert {w: where[w] for w in selected} == {w: ray_node[w] for w in selected}
    assert where[PARAMETER_SERVER_ID] == ray_node["head"]
    assert all("host speed" in label for label in result.events[2].data["devices"].values())


def test_deepedge_update_plans_from_the_agents_without_a_cluster_file(
    site: Site, tmp_path: Path
) -> None:
    import json

    from typer.testing import CliRunner

    from deepedge.cli import app

    args = ["update", "--workload", "digits", "--address", site.cluster.address]
    args += ["--ps-node", "head", "--max-epochs", "2", "--out", str(tmp_path), "-o", "json"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    planned = {w["id"] for w in summary["plan"]["workers"]}
    assert planned == set(WORKERS)  # every alive node but the PS's, from the reports


def test_a_model_update_job_on_the_live_cluster_plans_from_the_agents(
    site: Site, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from deepedge.service.learner import ModelUpdateSpec, _run_workload_update

    monkeypatch.setenv("DEEPEDGE_CHECKPOINT_DIR", str(tmp_path))
    spec = ModelUpdateSpec(workload="digits", live_cluster=True, ps_node="head", epochs=2)
    summary = _run_workload_update(spec)
    assert {w["id"] for w in summary["plan"]["workers"]} == set(WORKERS)


def test_a_service_learner_runs_as_a_ray_task_on_its_node(site: Site, tmp_path: Path) -> None:
    """The collector's chain: collector -> ray_learner driver -> a task on n1 -> the learner;
    the learner's output reaches the collector's log and its exit status the exit file."""
    import json

    from deepedge.runtime.cluster.live_cluster import LiveCluster

    learner = "import os, sys; print('learning', os.environ['DEEPEDGE_JOB_ID']); sys.exit(3)"
    log, exit_file = tmp_path / "learner.log", tmp_path / "exit.json"
    collector = [
        sys.executable, "-m", "deepedge.service.collector", "--log", str(log),
        "--pid-file", str(tmp_path / "pid.json"), "--exit-file", str(exit_file),
        "--cwd", str(tmp_path), "--attempt", "0", "--mem-mb", "1048576", "--",
        sys.executable, "-m", "deepedge.runtime.cluster.ray_learner",
        "--address", site.cluster.address,
        "--node", "n1", "--cpus", "1", "--mem-mb", "256", "--",
        sys.executable, "-c", learner,
    ]  # fmt: skip
    env = {**os.environ, "DEEPEDGE_JOB_ID": "job-7"}
    assert subprocess.run(collector, env=env, timeout=300, check=False).returncode == 0
    assert json.loads(exit_file.read_text())["exit_code"] == 3
    text = log.read_text()
    assert "learning job-7" in text
    n1 = next(r.ray_node_id for r in LiveCluster().alive() if r.node_id == "n1")
    assert f"learner task on Ray node {n1}" in text


def test_a_stopped_raylet_is_detected_struck_and_the_update_replans(
    site: Site, tmp_path: Path
) -> None:
    from deepedge.runtime.cluster.live_cluster import LiveCluster

    victim: list[str] = []

    def on_event(event: UpdateEvent) -> None:
        if "plan" in event.data and not victim:
            victim.append(sorted(event.data["plan"])[0])
        if event.data.get("epoch") == 1 and len(victim) == 1:
            site.cluster.stop_node(victim[0])  # its raylet dies between epochs 1 and 2
            victim.append("stopped")
            _until_lost(victim[0])  # epoch 2 must not finish before the loss can be seen

    result = site.update(
        "head", ("head",), ("n1", "n2"), checkpoint_dir=tmp_path, on_event=on_event
    )
    lost = victim[0]
    failure = result.failures[0]
    assert failure.worker_id == lost
    assert failure.kind in (FailureKind.PROCESS_DIED, FailureKind.NODE_LOST)
    assert result.strikes[lost] == 1 and result.restarts == 1
    assert lost not in [w.id for w in result.plan.workers]  # re-planned over survivors
    assert len(result.accuracies) == 3  # resumed from the checkpoint of epoch 1
    views = {v.report.node_id: v.status for v in LiveCluster().views()}
    assert views[lost] is NodeStatus.LOST


def test_losing_the_ps_node_restarts_the_ps_elsewhere_from_its_checkpoint(
    site: Site, tmp_path: Path
) -> None:
    from deepedge.runtime.cluster.live_cluster import LiveCluster

    survivors = tuple(sorted({"n1", "n2"} & {r.node_id for r in LiveCluster().alive()}))
    assert survivors
    stopped: list[bool] = []

    def on_event(event: UpdateEvent) -> None:
        if event.data.get("epoch") == 1 and not stopped:
            site.cluster.stop_node("n3")
            stopped.append(True)
            _until_lost("n3")

    result = site.update(
        "n3", ("n3", "head"), survivors, checkpoint_dir=tmp_path, on_event=on_event
    )
    ray_node = {v.report.node_id: v.report.ray_node_id for v in LiveCluster().views()}
    first, last = result.placements[0], result.placements[-1]
    assert first[PARAMETER_SERVER_ID] == ray_node["n3"]
    assert last[PARAMETER_SERVER_ID] == ray_node["head"]
    assert result.failures[0].worker_id == PARAMETER_SERVER_ID
    assert result.strikes.get(survivors[0], 0) == 0  # the PS's loss strikes no worker
    assert len(result.accuracies) == 3
    assert any("resuming" in e.message or "restart" in e.message for e in result.events)


def test_an_agent_joins_labelled_and_its_sigterm_drains_an_update_without_a_strike(
    site: Site, tmp_path: Path
) -> None:
    """``deepedge agent`` without ``--no-join`` starts the device's raylet (labelled; extra
    ``ray start`` options after ``--``). SIGTERM mid-update drains it: the update moves its
    worker off without a strike and finishes; the agent then leaves and stops its raylet."""
    import random
    import signal

    import ray

    from deepedge.runtime.cluster.live_cluster import LiveCluster
    from deepedge.runtime.cluster.local_cluster import NodePorts, free_port_block
    from deepedge.runtime.cluster.session import alive_node_resources, node_resource

    ports = NodePorts(free_port_block(48, set(), random.Random()))
    temp = site.cluster.root / "n9"
    temp.mkdir()
    stderr = tmp_path / "agent.err"
    agent = subprocess.Popen(
        [sys.executable, "-m", "deepedge", "agent", "--address", site.cluster.address,
         "--id", "n9", "--device-type", "raspberry-pi-4", "--heartbeat-s", str(HEARTBEAT_S),
         "--lost-after-s", str(LOST_AFTER_S), "--drain-timeout-s", "60", "--",
         "--node-ip-address=127.0.0.9", f"--temp-dir={temp}", "--num-cpus=1",
         "--object-store-memory=83886080", *ports.args()],
        stderr=stderr.open("w"),
    )  # fmt: skip
    try:
        LiveCluster().wait_for(["n9"], timeout_s=180)
        (n9,) = [n["Labels"] for n in ray.nodes() if n["NodeManagerAddress"] == "127.0.0.9"]
        assert n9["deepedge.node-id"] == "n9" and n9["deepedge.device-type"] == "raspberry-pi-4"
        survivor = sorted({"n1", "n2"} & {r.node_id for r in LiveCluster().alive()})[0]
        planned: list[set[str]] = []

        def on_event(event: UpdateEvent) -> None:
            if "plan" in event.data:
                planned.append(set(event.data["plan"]))
            if event.data.get("epoch") == 1 and agent.returncode is None and not planned[1:]:
                agent.send_signal(signal.SIGTERM)  # mid-update: epoch 2 must see the drain
                assert wait_until(lambda: "n9" in LiveCluster().draining(["n9"]), 60, 0.1)

        result = site.update("head", ("head",), ("n9", survivor), checkpoint_dir=tmp_path,
                             on_event=on_event)  # fmt: skip
        assert "n9" in planned[0]  # the drain had work to move
        assert len(result.accuracies) == 3 and result.restarts == 1
        (failure,) = result.failures
        assert (failure.worker_id, failure.kind, failure.strikes) == (
            "n9",
            FailureKind.NODE_DRAINED,
            0,
        )
        assert result.strikes.get("n9", 0) == 0
        assert any(e.message.startswith("node n9 drains: moved worker n9 without a strike")
                   for e in result.events)  # fmt: skip
        assert "n9" not in planned[-1]  # re-planned over the others
        assert agent.wait(timeout=120) == 0
        said = stderr.read_text()
        assert "node n9 drained in" in said and "node n9 left the cluster" in said
        views = {v.report.node_id: v.status for v in LiveCluster().views()}
        assert views["n9"] is NodeStatus.LEFT
        assert wait_until(
            lambda: node_resource("n9") not in alive_node_resources(site.cluster.address), 60
        ), "the joined raylet outlived its agent"
    finally:
        if agent.poll() is None:
            agent.kill()


def test_a_lost_node_rejoins_with_its_agent_command_on_a_fresh_temp_dir(
    site: Site, tmp_path: Path
) -> None:
    """docs/CLUSTER.md, "Rejoin a lost node": the node's raylet is killed (the way a device
    dies); the registry counts it lost and its agent exits 1. Once Ray counts that raylet
    dead, the same ``deepedge agent`` command on a fresh ``--temp-dir`` brings the node back
    alive under a new Ray node id. Neither agent shows Ray's banner (``ray stop``)."""
    import random

    import psutil

    from deepedge.runtime.cluster.live_cluster import LiveCluster
    from deepedge.runtime.cluster.local_cluster import NodePorts, free_port_block
    from deepedge.runtime.cluster.session import alive_node_resources, node_resource

    ports = NodePorts(free_port_block(48, set(), random.Random()))

    def agent(temp: Path, stderr: Path) -> subprocess.Popen[bytes]:
        temp.mkdir()
        return subprocess.Popen(
            [sys.executable, "-m", "deepedge", "agent", "--address", site.cluster.address,
             "--id", "n8", "--device-type", "raspberry-pi-4", "--heartbeat-s", str(HEARTBEAT_S),
             "--lost-after-s", str(LOST_AFTER_S), "--",
             "--node-ip-address=127.0.0.8", f"--temp-dir={temp}", "--num-cpus=1",
             "--object-store-memory=83886080", *ports.args()],
            stderr=stderr.open("w"),
        )  # fmt: skip

    def ray_node_of_n8() -> str:
        (report,) = [r for r in LiveCluster().wait_for(["n8"], 180) if r.node_id == "n8"]
        return report.ray_node_id or ""

    def status_of_n8() -> NodeStatus:
        return {v.report.node_id: v.status for v in LiveCluster().views()}["n8"]

    said = [tmp_path / "first.err", tmp_path / "again.err"]
    agents = [agent(site.cluster.root / "n8", said[0])]
    try:
        first_ray_node = ray_node_of_n8()
        raylets = [p for p in psutil.Process(agents[0].pid).children(recursive=True)
                   if p.name() == "raylet"]  # fmt: skip
        assert len(raylets) == 1
        raylets[0].kill()
        assert agents[0].wait(timeout=180) == 1  # its actor died with the raylet
        assert wait_until(lambda: status_of_n8() is NodeStatus.LOST, 60)
        assert wait_until(
            lambda: node_resource("n8") not in alive_node_resources(site.cluster.address), 180
        ), "Ray still counts the killed raylet alive"

        agents.append(agent(site.cluster.root / "n8-again", said[1]))
        assert ray_node_of_n8() not in ("", first_ray_node)
        assert status_of_n8() is NodeStatus.ALIVE and agents[1].poll() is None
        for path in said:
            text = path.read_text()
            assert "`ray start` writes to" in text and "ray stop" not in text, text
    finally:
        for one in agents:
            if one.poll() is None:
                one.terminate()  # drains (nothing runs there), leaves, stops its raylet
                try:
                    one.wait(timeout=90)
                except subprocess.TimeoutExpired:
                    one.kill()

"""A model update on a real multi-node Ray cluster: ``python -m deepedge.bench.cluster``.

On this machine it starts a real Ray cluster (:class:`LocalRayCluster`: a head and three
raylets, each a ``ray start`` with its own loopback address, ports, temp dir, one CPU and
its ``deepedge-node:`` resource) and one ``deepedge agent`` process per node. Then:

1. **Planned from reports.** The update's ClusterSpec is built from the agents' latest
   reports (no cluster file); Algorithm 1 plans on the learned models of each device type
   when ``--models`` covers them, else on the catalog. The PS runs on the head node, the
   workers on n1-n3, unpaced (emulation off). ``placed_frac`` is the fraction of the
   launched workers, over every launch of both runs, that ran on the Ray node of the agent
   whose id they carry (read back from the GCS's actor table).
2. **Node loss.** The same update again; in the middle of epoch ``E/3`` the raylet of one
   selected worker is killed (SIGKILL of the ``raylet`` process, not of an actor).
   ``detect_s`` is the time from the kill to the update's failure event (the worker's
   strike). The update re-plans over the surviving nodes and resumes from the PS
   checkpoint; ``fault_acc_delta`` = |final accuracy of the faulty run - the clean run's|,
   both scored on held-out images (true labels).
3. **Overhead.** After the cluster is torn down, the clean run's plan is run again on an
   embedded single-node Ray (same shards, batches and epochs, unpaced);
   ``overhead`` = median epoch time across raylets / median epoch time embedded.

Last line: ``RESULT nodes=... placed_frac=... detect_s=... fault_acc_delta=... overhead=...``.
"""

from __future__ import annotations

import argparse
import functools
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn

from deepedge.bench.harness.report import machine_description, result_line, table
from deepedge.bench.harness.scale import Scale, Sizes
from deepedge.learning.convergence import StoppingRule
from deepedge.learning.models import get_flat_weights, make_edge_model, set_flat_weights
from deepedge.learning.stream import DriftConfig, DriftingStream, load_digits_images
from deepedge.learning.training import TrainConfig, accuracy, train_epochs
from deepedge.planning.sharding.plan import ShardPlan
from deepedge.planning.sharding.spec import ClusterSpec
from deepedge.runtime.training.monitor import UpdateEvent
from deepedge.runtime.training.update import UpdateConfig, UpdateResult, run_model_update

WORKERS = ("n1", "n2", "n3")
PS_NODE = "head"
HEARTBEAT_S = 1.0
LOST_AFTER_S = 3.0


@dataclass(frozen=True)
class ClusterScale(Scale):
    window_size: int
    train_windows: int  # drifted windows 4, 5, ... trained on (a fifth is the validation)
    epochs: int  # fixed: both runs train exactly this many epochs
    max_batch: int  # b_max of every worker: many steps per epoch, so an epoch lasts


# 12 epochs with the kill in epoch 4: the update runs on well past the detection.
SCALES = Sizes(
    full=ClusterScale(window_size=400, train_windows=8, epochs=12, max_batch=8),
    quick=ClusterScale(window_size=400, train_windows=4, epochs=6, max_batch=8),
)

Data = tuple[np.ndarray, np.ndarray]


def placed_fraction(
    results: list[UpdateResult], ray_node_of: dict[str, str]
) -> tuple[float, int, int]:
    """(matched / launched, matched, launched) over every launch's selected workers."""
    matched = launched = 0
    for result in results:
        for plan, where in zip(result.plans, result.placements, strict=True):
            for wid in plan.selected_ids:
                launched += 1
                matched += int(where.get(wid) is not None and where.get(wid) == ray_node_of[wid])
    return (matched / launched if launched else 0.0), matched, launched


def _median_epoch_s(result: UpdateResult) -> float:
    return statistics.median(e.wall_s for e in result.epochs)


def _score(factory: Callable[[], nn.Module], weights: np.ndarray, held_out: Data) -> float:
    model = factory()
    set_flat_weights(model, weights)
    return accuracy(model, *held_out)


def _start_agents(address: str) -> list[subprocess.Popen[bytes]]:
    return [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "deepedge",
                "agent",
                "--address",
                address,
                "--id",
                node,
                "--device-type",
                "raspberry-pi-4",
                "--heartbeat-s",
                str(HEARTBEAT_S),
                "--lost-after-s",
                str(LOST_AFTER_S),
                "--no-join",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for node in (PS_NODE, *WORKERS)
    ]


def _stop_agents(agents: list[subprocess.Popen[bytes]]) -> None:
    for proc in agents:
        proc.terminate()
    for proc in agents:
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()


def run_on_cluster(
    scale: ClusterScale,
    train: Data,
    val: Data,
    factory: Callable[[], nn.Module],
    weights: np.ndarray,
    models_root: Path | None,
    seed: int,
) -> dict[str, object]:
    """Measurements 1 and 2 (module docstring) on a fresh local multi-node cluster."""
    from deepedge.runtime.cluster.live_cluster import (
        LiveCluster,
        live_planner,
        performance_model_for,
    )
    from deepedge.runtime.cluster.local_cluster import LocalRayCluster
    from deepedge.runtime.cluster.session import ensure_ray, shutdown_ray

    out: dict[str, object] = {}
    rule = StoppingRule(min_epochs=scale.epochs, max_epochs=scale.epochs)
    config = UpdateConfig(time_scale=0.0, stopping=rule, seed=seed, min_epoch_timeout_s=300.0)
    cluster = LocalRayCluster(worker_ids=WORKERS, cpus_per_node=1, seed=seed)
    agents: list[subprocess.Popen[bytes]] = []
    started = time.perf_counter()
    try:
        cluster.start()
        agents = _start_agents(cluster.address)
        ensure_ray(address=cluster.address)
        live = LiveCluster(
            ps_node=PS_NODE, ps_candidates=(PS_NODE,), workers=WORKERS, max_batch=scale.max_batch
        )
        reports = live.wait_for((PS_NODE, *WORKERS), timeout_s=300)
        out["startup_s"] = time.perf_counter() - started
        out["nodes"] = len(reports)
        ray_node_of = {r.node_id: r.ray_node_id for r in reports}
        spec = live.spec(len(train[1]))
        out["spec"] = spec
        out["model_source"] = performance_model_for(spec, models_root)[1]
        planner = live_planner(models_root)

        def update(on_event: Callable[[UpdateEvent], None] | None) -> UpdateResult:
            with tempfile.TemporaryDirectory() as ckpt:
                return run_model_update(
                    spec,
                    train,
                    val,
                    factory,
                    weights,
                    Path(ckpt),
                    planner=planner,
                    config=config,
                    resume=False,
                    live=live,
                    on_event=on_event,
                )

        clean = update(None)
        out["clean"] = clean
        victim = clean.plans[0].selected_ids[0]
        kill_epoch = max(1, scale.epochs // 3)
        delay_s = _median_epoch_s(clean) / 2
        killed_at: list[float] = []
        armed: list[threading.Timer] = []

        def kill() -> None:
            killed_at.append(time.time())
            cluster.stop_node(victim)

        def on_event(event: UpdateEvent) -> None:
            # once epoch kill_epoch - 1 is scored, the kill lands mid-epoch kill_epoch
            due = event.data.get("epoch") == kill_epoch - 1 or (
                kill_epoch == 1 and "plan" in event.data
            )
            if due and not armed:
                armed.append(threading.Timer(delay_s, kill))
                armed[0].start()

        faulty = update(on_event)
        out["faulty"] = faulty
        out["victim"] = victim
        t_kill = killed_at[0] if killed_at else float("inf")
        failed = [e for e in faulty.events if e.at_s >= t_kill and "failed" in e.message]
        out["detect_s"] = failed[0].at_s - t_kill if failed else float("nan")
        frac, matched, launched = placed_fraction([clean, faulty], ray_node_of)
        out["placed_frac"], out["placed"] = frac, f"{matched}/{launched}"
    finally:
        shutdown_ray()
        _stop_agents(agents)
        cluster.stop()
    return out


def run_embedded(
    spec: ClusterSpec,
    plan: ShardPlan,
    scale: ClusterScale,
    train: Data,
    val: Data,
    factory: Callable[[], nn.Module],
    weights: np.ndarray,
    seed: int,
) -> UpdateResult:
    """Measurement 3's baseline: the same plan on an embedded single-node Ray."""
    from deepedge.runtime.cluster.session import ray_session

    rule = StoppingRule(min_epochs=scale.epochs, max_epochs=scale.epochs)
    config = UpdateConfig(time_scale=0.0, stopping=rule, seed=seed, min_epoch_timeout_s=300.0)
    embedded = spec.model_copy(
        update={"parameter_server": spec.parameter_server.model_copy(update={"node": None})}
    )
    with ray_session(num_cpus=2, address="local"), tempfile.TemporaryDirectory() as ckpt:
        return run_model_update(
            embedded, train, val, factory, weights, Path(ckpt), plan=plan, config=config
        )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--models", type=Path, default=None, help="learned models, one sub-directory per device"
    )
    args = parser.parse_args(argv)
    scale = SCALES.pick(args.quick)
    started = time.perf_counter()
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)
    stream = DriftingStream(
        load_digits_images(16),
        DriftConfig(seed=args.seed, window_size=scale.window_size),
    )
    factory = functools.partial(make_edge_model, 10, 16, 8, args.seed)
    base = factory()  # trained before the drift; the update adapts it to the drifted regime
    before = [stream.window(t) for t in (0, 1)]
    train_epochs(
        base,
        np.concatenate([w.images for w in before]),
        np.concatenate([w.labels for w in before]),
        8,
        TrainConfig(),
        seed=args.seed,
    )
    drifted = [stream.window(t) for t in range(4, 4 + scale.train_windows)]
    x = np.concatenate([w.images for w in drifted])
    y = np.concatenate([w.labels for w in drifted])
    order = np.random.default_rng(args.seed).permutation(len(x))
    n_val = len(x) // 5
    val = (x[order[:n_val]], y[order[:n_val]])
    train = (x[order[n_val:]], y[order[n_val:]])
    held_from = 4 + scale.train_windows
    held = [stream.window(t) for t in range(held_from, held_from + 4)]
    held_out = (np.concatenate([w.images for w in held]), np.concatenate([w.labels for w in held]))
    weights = get_flat_weights(base)

    measured = run_on_cluster(scale, train, val, factory, weights, args.models, args.seed)
    clean, faulty = measured["clean"], measured["faulty"]
    assert isinstance(clean, UpdateResult) and isinstance(faulty, UpdateResult)
    spec = measured["spec"]
    assert isinstance(spec, ClusterSpec)
    embedded = run_embedded(spec, clean.plans[0], scale, train, val, factory, weights, args.seed)
    acc_clean = _score(factory, clean.weights, held_out)
    acc_faulty = _score(factory, faulty.weights, held_out)
    acc_embedded = _score(factory, embedded.weights, held_out)
    overhead = _median_epoch_s(clean) / _median_epoch_s(embedded)
    failure = faulty.failures[0] if faulty.failures else None
    rows: list[list[object]] = [
        ["nodes (head + raylets), all reporting", measured["nodes"]],
        ["cluster + agents start-up (s)", measured["startup_s"]],
        ["performance models of the plan", measured["model_source"]],
        ["plan (worker: shard/batch)", _plan_text(clean.plans[0])],
        ["workers placed as planned", measured["placed"]],
        ["stopped raylet of", measured["victim"]],
        ["failure seen as", f"{failure.kind.value} of {failure.worker_id}" if failure else "none"],
        ["detection after the kill (s)", measured["detect_s"]],
        ["re-plan after the loss", _plan_text(faulty.plan)],
        ["restarts / strikes", f"{faulty.restarts} / {faulty.strikes}"],
        ["validation accuracy per epoch, clean", _accs(clean)],
        ["validation accuracy per epoch, node lost", _accs(faulty)],
        ["held-out accuracy, clean run (best epoch)", f"{acc_clean:.4f} ({clean.best_epoch})"],
        ["held-out accuracy, node lost (best epoch)", f"{acc_faulty:.4f} ({faulty.best_epoch})"],
        ["held-out accuracy, embedded run (same plan)", acc_embedded],
        ["median epoch (s), across raylets", _median_epoch_s(clean)],
        ["median epoch (s), embedded single node", _median_epoch_s(embedded)],
    ]
    print(
        f"# deepedge.bench.cluster{' --quick' if args.quick else ''} on {machine_description()}; "
        f"a real {measured['nodes']}-node Ray cluster on loopback, unpaced (no emulation), "
        f"{scale.epochs} epochs"
    )
    print(table(["measurement", "value"], rows))
    print(f"elapsed {time.perf_counter() - started:.0f} s")
    print(
        result_line(
            {
                "nodes": int(measured["nodes"]),  # type: ignore[call-overload]
                "placed_frac": float(measured["placed_frac"]),  # type: ignore[arg-type]
                "detect_s": float(measured["detect_s"]),  # type: ignore[arg-type]
                "fault_acc_delta": abs(acc_faulty - acc_clean),
                "overhead": overhead,
            }
        )
    )


def _accs(result: UpdateResult) -> str:
    return " ".join(f"{a:.3f}" for a in result.accuracies)


def _plan_text(plan: ShardPlan) -> str:
    return " ".join(f"{w.id}:{w.shard}/{w.batch_size}" for w in plan.workers if w.selected)


if __name__ == "__main__":
    main()

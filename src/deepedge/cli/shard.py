"""``deepedge plan shard FILE`` (Deep-Edge Algorithm 1) and ``deepedge plan shard-schemas``.

The plan is computed from the analytic device catalog (the emulated devices), optionally
seen through seeded multiplicative noise (``--noise``) as a stand-in for learned estimates,
or from learned models fitted on a real profile (``--models DIR``, ``deepedge perfmodels fit``).
A cluster in which no worker can train is reported, not crashed on: the plan (with every
worker's exclusion reason) goes to stdout and one ``error:`` line naming the blocking apps
to stderr, exit status 2.
"""

from __future__ import annotations

import json
from pathlib import Path

import typer

from deepedge.cli.app import check_number, echo_json, group, load_document, run_guarded
from deepedge.cli.render import table
from deepedge.core.errors import InvalidInputError
from deepedge.perfmodel.catalog import DeviceCatalog
from deepedge.perfmodel.noisy import NoisyModel
from deepedge.perfmodel.protocol import PerformanceModel
from deepedge.planning.sharding import shard_policy
from deepedge.planning.sharding.plan import Policy, ShardPlan, plan_schema
from deepedge.planning.sharding.spec import ClusterSpec, cluster_schema

plan_app = group("plan")

SCHEMA_FILES = {
    "shard-cluster.schema.json": cluster_schema,
    "shard-plan.schema.json": plan_schema,
}


def render_explanation(cluster: ClusterSpec, plan: ShardPlan) -> str:
    """A readable table of the plan: one row per worker, with the reason for exclusions."""
    devices = {w.id: w.device.value for w in cluster.workers}
    rows = []
    reasons = []
    for w in plan.workers:
        if w.blocker is not None:
            reasons.append(f"  {w.id}: {w.exclusion} ({w.blocker.describe()})")
        elif not w.selected:
            reasons.append(f"  {w.id}: {w.exclusion}")
        rows.append(
            [
                w.id,
                devices[w.id],
                "yes" if w.selected else "no",
                w.shard,
                w.batch_size,
                "-" if w.t_total_s_per_sample is None else f"{w.t_total_s_per_sample:.4f}",
                "-" if w.epoch_time_s is None else f"{w.epoch_time_s:.1f}",
            ]
        )
    headers = ["worker", "device", "selected", "shard", "batch", "s/sample", "epoch s"]
    lines = [f"policy: {plan.policy}   |M| = {plan.dataset_size}", table(headers, rows)]
    if reasons:
        lines += ["excluded (reason):", *reasons]
    if plan.feasible:
        lines.append(
            f"predicted epoch time {plan.epoch_time_s:.1f} s; total cost "
            f"({cluster.num_epochs} epochs, transfer and init included) {plan.total_cost_s:.1f} s"
        )
    else:
        lines.append("no feasible worker: " + plan.infeasibility_summary())
    return "\n".join(lines)


def make_plan(
    cluster: ClusterSpec,
    policy: Policy,
    noise: float,
    seed: int,
    models_dir: Path | None = None,
) -> tuple[ShardPlan, PerformanceModel]:
    """Plan ``cluster`` with ``policy`` from the catalog's (optionally noisy) estimates, or
    from the learned models in ``models_dir`` (``deepedge perfmodels fit``)."""
    model: PerformanceModel
    if models_dir is None:
        model = DeviceCatalog(ps_device=cluster.parameter_server.device)
    else:  # scikit-learn is loaded only for learned models
        from deepedge.perfmodel.fitted_model import load_performance_model

        model = load_performance_model(models_dir)
    if noise > 0.0:
        model = NoisyModel(model, noise, seed=seed)
    return shard_policy(policy)(cluster, model), model


@plan_app.command("shard")
def plan_shard(
    file: Path = typer.Argument(..., help="cluster JSON (docs/schemas/shard-cluster.schema.json)"),
    explain: bool = typer.Option(False, "--explain", help="print a readable table, not JSON"),
    noise: float = typer.Option(
        0.0, "--noise", help="relative error of the estimates the planner sees (0 = exact)"
    ),
    seed: int = typer.Option(0, "--seed", help="seed of the estimate noise"),
    policy: Policy = typer.Option(
        Policy.DEEP_EDGE,
        "--policy",
        help="deep-edge (Algorithm 1), deep-edge-plus (by Total_cost), fair, oracle (N <= 6)",
    ),
    models: Path | None = typer.Option(
        None,
        "--models",
        help="learned models directory (deepedge perfmodels fit) for the estimates",
    ),
) -> None:
    """Choose workers, data shards and batch sizes (Deep-Edge Algorithm 1 or another policy)."""

    def go() -> None:
        check_number(noise, "--noise", ge=0.0)
        cluster = load_document(file, ClusterSpec)
        plan, _ = make_plan(cluster, policy, noise, seed, models)
        if explain:
            typer.echo(render_explanation(cluster, plan))
        else:
            echo_json(plan)
        if not plan.feasible:
            raise InvalidInputError(
                "no feasible worker: " + plan.infeasibility_summary(), field="workers"
            )

    run_guarded(go)


@plan_app.command("shard-schemas")
def shard_schemas(
    out_dir: Path = typer.Argument(Path("docs/schemas"), help="folder to write the schemas to"),
) -> None:
    """Write the JSON Schemas of the sharding input and output documents."""

    def go() -> None:
        try:
            out_dir.mkdir(parents=True, exist_ok=True)
            for name, schema in SCHEMA_FILES.items():
                (out_dir / name).write_text(json.dumps(schema(), indent=2) + "\n")
        except OSError as exc:
            raise InvalidInputError(f"cannot write to {out_dir}: {exc.strerror}") from exc
        typer.echo(f"wrote {', '.join(SCHEMA_FILES)} to {out_dir}")

    run_guarded(go)

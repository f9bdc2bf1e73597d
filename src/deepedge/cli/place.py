"""``deepedge plan place FILE.json``: MVSP variant selection, placement and routing.

The solver may run up to ``--time-limit``: a spinner with the time taken is shown on stderr
meanwhile (the progress helper); stdout is the solution alone.
"""

from __future__ import annotations

from pathlib import Path

import typer

from deepedge.cli.app import check_number, echo_json, group, load_document, run_guarded
from deepedge.cli.progress import progress
from deepedge.cli.render import table
from deepedge.core.errors import DeepEdgeError, InfeasibleError
from deepedge.planning.placement import placement_policy
from deepedge.planning.placement.model import (
    Method,
    PlacementProblem,
    PlacementSolution,
    SolveStatus,
)

plan_app = group("plan")


def render(sol: PlacementSolution) -> str:
    """The readable form of a solution (``--explain``)."""
    gap = "n/a" if sol.gap is None else f"{sol.gap:.4%}"
    head = [
        f"problem {sol.problem}: {sol.status.value} by {sol.method.value}",
        f"objective {sol.objective:.6g}  bound {sol.bound if sol.bound is not None else 'n/a'}"
        f"  gap {gap}",
        f"average latency {sol.avg_latency_ms:.3f} ms, average utilisation cost {sol.avg_cost:.5f}",
    ]
    if sol.solver is not None:
        head.append(f"solver {sol.solver.name}: {sol.solver.model_status}, {sol.solver.time_s} s")
    placements = table(
        ["node", "model", "variant", "instances", "load rps", "capacity rps"],
        [[p.node, p.model, p.variant, p.instances, round(p.load_rps, 2),
          round(p.max_load_rps, 2)] for p in sol.placements],
    )  # fmt: skip
    nodes = table(
        ["node", "instances", "memory MB", "utilisation", "cost"],
        [[n.node, n.instances, round(n.memory_used_mb, 1), round(n.utilisation, 4),
          round(n.cost, 5)] for n in sol.nodes],
    )  # fmt: skip
    routes = table(
        ["source", "model", "node", "variant", "rate rps", "network ms", "inference ms",
         "latency ms", "limit ms"],
        [[r.source, r.model, r.node, r.variant, round(r.rate_rps, 2),
          round(r.comm_latency_ms, 2), round(r.inference_latency_ms, 2),
          round(r.latency_ms, 2), round(r.max_latency_ms, 2)] for r in sol.routes],
    )  # fmt: skip
    return "\n".join([*head, "", "placement", placements, "", "nodes", nodes, "", "routes", routes])


MAX_REASON_LINES = 10  # reasons printed one per line; the rest are counted


def summarise(reasons: list[str], prefix: str, limit: int = MAX_REASON_LINES) -> list[str]:
    """The first ``limit`` reasons, one line each, then one line counting the rest.

    A large infeasible document can block hundreds of thousands of demands; printing each
    buried the error line under about 500,000 lines of stderr.
    """
    lines = [f"{prefix}: {r}" for r in reasons[:limit]]
    rest = len(reasons) - limit
    if rest > 0:
        lines.append(f"{prefix}: ... and {rest} more (of {len(reasons)}; the first {limit} shown)")
    return lines


@plan_app.command("place")
def place(
    file: Path = typer.Argument(..., help="Placement problem (JSON or YAML)."),
    method: Method = typer.Option(Method.AUTO, "--method", help="milp, heuristic or auto."),
    time_limit: float = typer.Option(60.0, "--time-limit", help="Solver time limit, s."),
    explain: bool = typer.Option(False, "--explain", help="Readable tables instead of JSON."),
) -> None:
    """Choose model variants, place instances on edge nodes and route every source."""

    def go() -> None:
        from deepedge.planning.placement.check import check_solution  # SciPy

        check_number(time_limit, "--time-limit", gt=0.0)
        problem = load_document(file, PlacementProblem)
        with progress("place") as bar:
            bar.update(note=f"solving by {method.value} (time limit {time_limit:g} s)")
            try:
                sol = placement_policy(method)(problem, time_limit)
            except InfeasibleError as exc:
                for line in summarise(exc.reasons, "infeasible"):
                    typer.echo(line, err=True)
                raise
            bar.update(note=f"{sol.status.value} by {sol.method.value}")
        if sol.status == SolveStatus.NO_SOLUTION:
            for line in summarise(sol.explanation, "unplaced"):
                typer.echo(line, err=True)
            raise InfeasibleError(
                f"no feasible placement found by {sol.method.value} (not proven infeasible; "
                "try --method milp or a longer --time-limit)",
                reasons=sol.explanation,
            )
        report = check_solution(problem, sol)
        if not report.ok:
            raise DeepEdgeError("internal check failed: " + "; ".join(report.violations[:3]))
        if explain:
            typer.echo(render(sol))
        else:
            echo_json(sol)

    run_guarded(go)


@plan_app.command("place-schemas")
def place_schemas(
    folder: Path = typer.Argument(Path("docs/schemas"), help="Where to write the schemas."),
) -> None:
    """Write the JSON Schemas of the placement problem and solution documents."""
    import json

    from deepedge.planning.placement.model import placement_schemas

    def go() -> None:
        folder.mkdir(parents=True, exist_ok=True)
        for name, schema in placement_schemas().items():
            (folder / name).write_text(json.dumps(schema, indent=2, sort_keys=True) + "\n")
            typer.echo(str(folder / name))

    run_guarded(go)

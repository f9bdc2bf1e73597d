"""``deepedge demo``: the whole continuous-learning loop on the embedded defaults.

Starts a local Ray, emulates the paper's testbed (1 TX2, 3 Nano workers, a Pi 4 parameter
server and data store), streams drifting digit windows, detects the accuracy drop with
golden labels, plans with Deep-Edge, retrains with the asynchronous parameter server,
stops early, swaps the model and shows the accuracy recovering. Writes ``report.md``,
``accuracy.png`` and ``plans.json`` to the output folder. The story goes to stdout as it
happens; the windows done go to stderr (the progress helper).
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from deepedge.cli.app import RayAddress, app, run_guarded
from deepedge.cli.progress import progress
from deepedge.core.errors import InvalidInputError

if TYPE_CHECKING:
    from deepedge.runtime.training.loop import WindowRecord

log = logging.getLogger(__name__)


def _plot(result: object, path: Path, threshold: float) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    records = result.windows  # type: ignore[attr-defined]
    updates = result.updates  # type: ignore[attr-defined]
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    xs = [r.window for r in records]
    ax.plot(xs, [r.served_accuracy for r in records], "o-", label="served model (true labels)")
    ax.plot(xs, [r.golden_accuracy for r in records], "x--", label="vs golden labels")
    ax.plot(xs, [r.severity for r in records], ":", color="grey", label="drift severity")
    for r in records:
        if r.updated_accuracy is not None:
            ax.annotate(
                "",
                xy=(r.window, r.updated_accuracy),
                xytext=(r.window, r.served_accuracy),
                arrowprops={"arrowstyle": "->", "color": "green"},
            )
            ax.plot([r.window], [r.updated_accuracy], "g*", markersize=12)
    ax.axhline(threshold, color="red", linewidth=0.8, label="trigger threshold")
    ax.set_xlabel("window")
    ax.set_ylabel("accuracy")
    ax.set_ylim(0, 1.02)
    ax.set_title("Accuracy over time (star: after the update)")
    ax.legend(fontsize=7, loc="lower left")
    for i, u in enumerate(updates):
        ax2.plot(range(1, len(u.accuracies) + 1), u.accuracies, "o-", label=f"update {i + 1}")
    ax2.set_xlabel("epoch")
    ax2.set_ylabel("validation accuracy (golden labels)")
    ax2.set_title("Accuracy monitor per update")
    ax2.set_ylim(0, 1.02)
    ax2.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def window_note(record: WindowRecord) -> str:
    """A window of the loop on the progress line: the served accuracy, and the update's."""
    note = f"window {record.window}: v{record.served_version} {record.served_accuracy:.3f}"
    if record.updated_accuracy is not None:
        after = "rolled back" if record.rolled_back else f"{record.updated_accuracy:.3f}"
        note += f", update v{record.new_version} {after}"
    return note


DIGITS_NOTE = (
    "the edge CNN on scikit-learn digits under seeded drift (rotation, contrast, blur, "
    "noise, class mix), labelled by a golden CNN ensemble"
)


def _report(result: object, elapsed_s: float, data_note: str = DIGITS_NOTE) -> str:
    records = result.windows  # type: ignore[attr-defined]
    updates = result.updates  # type: ignore[attr-defined]
    config = result.config  # type: ignore[attr-defined]
    lines = [
        "# deepedge demo: continuous learning on an emulated edge cluster",
        "",
        f"Run time {elapsed_s:.0f} s. **Emulated**: the devices (1 Jetson TX2, 3 Jetson Nano "
        "workers, Raspberry Pi 4 parameter server and data store) are Ray actors on this "
        "machine that run real torch steps of the model and are slowed to the device "
        f"catalog's modelled step times (x{config.update.time_scale:g}). Workload: "
        f"{data_note}.",
        "",
        "![accuracy over time](accuracy.png)",
        "",
        "## Windows",
        "",
        "| window | severity | served | accuracy (true labels) | vs golden labels | trigger "
        "| after the update |",
        "|---:|---:|---:|---:|---:|---|---:|",
    ]
    for r in records:
        after = "" if r.updated_accuracy is None else f"{r.updated_accuracy:.3f} (v{r.new_version})"
        if r.rolled_back:
            after += " rolled back"
        lines.append(
            f"| {r.window} | {r.severity:.2f} | v{r.served_version} | {r.served_accuracy:.3f} "
            f"| {r.golden_accuracy:.3f} | {r.trigger.value} | {after} |"
        )
    for i, u in enumerate(updates, 1):
        lines += [
            "",
            f"## Update {i}",
            "",
            f"Stopped after {len(u.accuracies)} epochs ({u.stop_reason.value}); validation "
            f"accuracy per epoch: {', '.join(f'{a:.3f}' for a in u.accuracies)}. Restarts "
            f"{u.restarts}, strikes {u.strikes or '{}'}, excluded {list(u.excluded)}.",
            "",
            "| worker | selected | shard d_i | batch b_i | reason if excluded |",
            "|---|---|---:|---:|---|",
        ]
        for w in u.plan.workers:
            reason = w.exclusion.value if w.exclusion else ""
            lines.append(f"| {w.id} | {w.selected} | {w.shard} | {w.batch_size} | {reason} |")
        if u.epochs:
            walls = ", ".join(f"{e.wall_s:.2f}" for e in u.epochs)
            lines += ["", f"Measured epoch wall times (s, emulated devices): {walls}."]
        for f in u.failures:
            lines.append(
                f"- failure: {f.worker_id} {f.kind.value} in epoch {f.epoch}, strike {f.strikes}"
            )
    lines += [
        "",
        f"Golden model accuracy on the last window (true labels): "
        f"{result.golden_accuracy_last_window:.3f}.",  # type: ignore[attr-defined]
        "",
    ]
    return "\n".join(lines)


@app.command()
def demo(
    output: Path = typer.Option(Path("runs/demo"), "--out", help="folder for the report"),
    windows: int = typer.Option(7, min=2, help="stream windows to run"),
    seed: int = typer.Option(0, help="seed of the stream, models and plans"),
    image_folder: Path | None = typer.Option(
        None, help="use ROOT/<class>/<image> instead of the bundled digits"
    ),
    inject_fault: bool = typer.Option(False, help="crash one worker in the first update"),
    cpus: int = typer.Option(2, min=1, help="CPUs of the embedded Ray (not sent when connecting)"),
    address: RayAddress = None,
    workload: str | None = typer.Option(
        None, help="workload document or bundled name: its model, windows and labeller"
    ),
    site: bool = typer.Option(
        False, help="run the control plane instead: service, dashboard, one deployment"
    ),
    site_windows: int = typer.Option(
        150, min=2, help="with --site: at most this many windows (it ends after the rollback)"
    ),
    keep_serving: bool = typer.Option(
        False, help="with --site: serve until Ctrl-C, whether the story finished or not"
    ),
    port: int = typer.Option(
        0, min=0, max=65535, help="with --site: the service's port on 127.0.0.1 (0: a free one)"
    ),
    data_plane_port: int = typer.Option(
        0,
        min=0,
        max=65535,
        help="with --site: the data plane's HTTP port on 127.0.0.1 (0: a free one)",
    ),
    site_edge_server: bool = typer.Option(
        False, help="with --site: also a deployment on the edge server with Ekya windows"
    ),
) -> None:
    """Run the continuous-learning loop end to end and write a report (``--site``: the
    control plane with its dashboard, drift, updates and an automatic rollback)."""
    if site:
        from deepedge.cli.demo_site import run_site_demo

        started = time.perf_counter()
        run_guarded(
            lambda: run_site_demo(
                output.parent / "site" if output == Path("runs/demo") else output,
                site_windows,
                keep_serving,
                lambda m: typer.echo(f"[{time.perf_counter() - started:6.1f}s] {m}"),
                address,
                site_edge_server,
                port,
                data_plane_port,
            )
        )
        return

    def body() -> None:
        from deepedge.learning.stream import DriftConfig, load_image_folder
        from deepedge.runtime.cluster.session import ray_session
        from deepedge.runtime.training.loop import LoopConfig, run_loop
        from deepedge.runtime.training.update import FaultInjection

        started = time.perf_counter()

        def say(message: str) -> None:
            typer.echo(f"[{time.perf_counter() - started:6.1f}s] {message}")

        def on_event(event: object) -> None:
            typer.echo(f"{'':10}  {event.status.value}: {event.message}")  # type: ignore[attr-defined]

        config = LoopConfig(
            seed=seed,
            n_windows=windows,
            drift=DriftConfig(seed=seed),
            fault=FaultInjection("nano-1", after_steps=4) if inject_fault else None,
        )
        from deepedge.workload.resolve import load_workload

        if workload is not None and image_folder is not None:
            raise InvalidInputError(
                "give --workload or --image-folder, not both", field="image_folder"
            )
        loaded = load_workload(workload) if workload is not None else None
        if loaded is not None:
            loaded.require_windows(windows)
        source = load_image_folder(image_folder) if image_folder is not None else None
        output.mkdir(parents=True, exist_ok=True)
        with progress("demo", total=windows, unit="windows") as bar:

            def window_done(record: WindowRecord) -> None:
                bar.update(record.window + 1, note=window_note(record))

            bar.update(note="training the models, starting Ray")
            with ray_session(cpus, address):
                result = run_loop(config, output, source, say, on_event, loaded, window_done)
        elapsed = time.perf_counter() - started
        _plot(result, output / "accuracy.png", config.trigger.accuracy_threshold)
        plans = [u.plan.model_dump(mode="json") for u in result.updates]
        (output / "plans.json").write_text(json.dumps(plans, indent=2))
        note = DIGITS_NOTE
        if loaded is not None:
            note = (
                f"{loaded.spec.name} ({loaded.parameters:,} parameters, {loaded.trainable:,} "
                f"trainable; labelled by {loaded.spec.labeller.kind})"
            )
        (output / "report.md").write_text(_report(result, elapsed, note))
        typer.echo(f"report: {output / 'report.md'} ({elapsed:.0f} s)")

    run_guarded(body)

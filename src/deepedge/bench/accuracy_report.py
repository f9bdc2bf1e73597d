"""What ``bench.accuracy`` prints and keeps: its tables, ``accuracy.json`` (per-window
series of the site, the no-update and the offline references; the decisions with their
windows and verdicts; the updates' times) and a plot of served accuracy per window for
each workload (``accuracy-<workload>.png``, matplotlib); with the models and the answered
requests of every run, so that the figures can be measured again."""

from __future__ import annotations

import bisect
import dataclasses
import json
import math
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from deepedge.bench.accuracy_parts import Measured
from deepedge.bench.harness.report import format_value, table
from deepedge.learning.scheduled_stream import SEGMENTS


def _f(value: float) -> str:
    return "-" if value is None or not math.isfinite(value) else f"{value:.3f}"


def window_of(at: float, starts: list[float]) -> int:
    """The trace window running at wall time ``at`` (-1: before the first)."""
    return bisect.bisect_right(starts, at) - 1


def render(m: Measured) -> str:
    """The run's tables: per segment, the decisions, the updates, and its figures."""
    run, trace = m.run, m.run.settings.trace()
    rows = []
    for k, name in enumerate(SEGMENTS):
        part = slice(trace.segment_start(k), trace.segment_start(k) + trace.segment_windows)
        served, ref = m.served[part], m.reference[part]
        rows.append([name, f"{part.start}-{part.stop - 1}", _f(np.nanmean(served)),
                     _f(np.nanmean(m.no_update[part])), _f(np.nanmean(ref)),
                     _f(np.nanmean(served) / np.nanmean(ref)),
                     f"{_f(np.nanmin(served))}-{_f(np.nanmax(served))}"])  # fmt: skip
    out = [f"{run.part} ({run.workload.name}): served accuracy per segment",
           table(["segment", "windows", "served", "no update", "reference", "ratio",
                  "served min-max"], rows)]  # fmt: skip
    decided = [[window_of(v.decision.at, run.starts), v.decision.kind.value,
                f"v{v.decision.chosen} over v{v.decision.alternative}",
                _f(v.chosen_accuracy), _f(v.alternative_accuracy),
                ",".join(map(str, v.windows)) or "-",
                "WRONG" if v.wrong else ("ok" if v.judged else "not judged")]
               for v in m.verdicts]  # fmt: skip
    out += ["decisions (judged on the next windows' requests, both versions scored offline)",
            table(["window", "decision", "chose", "acc chosen", "acc other", "judged on",
                   "verdict"], decided) if decided else "  none"]  # fmt: skip
    updates = [[f"v{u.version}", window_of(u.triggered_at, run.starts), u.outcome,
                _f(u.seconds) if u.seconds is not None else "-"] for u in m.updates]  # fmt: skip
    out += [
        "updates (trigger event to the version's first answer)",
        table(["version", "window", "outcome", "seconds"], updates) if updates else "  none",
    ]
    if run.requests:
        latency = np.array([r.at - r.sent_at for r in run.requests])
        behind = max(run.starts[w] - run.starts[0] - w * run.settings.window_s
                     for w in range(len(run.starts)))  # fmt: skip
        out.append(f"answers: latency p50 {np.median(latency):.2f} s, max {latency.max():.2f} s;"
                   f" the camera was at most {behind:.1f} s behind its schedule")  # fmt: skip
    out.append(", ".join(f"{k} {format_value(v)}" for k, v in m.figures.items()))
    return "\n".join(out)


def record(m: Measured) -> dict[str, Any]:
    """One run as JSON: its series per window, decisions, updates and figures."""
    run, trace = m.run, m.run.settings.trace()

    def value(x: float) -> float | None:
        return float(x) if math.isfinite(x) else None

    versions: dict[int, dict[str, int]] = {}
    latency: dict[int, list[float]] = {}
    for r in run.requests:
        counts = versions.setdefault(r.window, {})
        counts[str(r.version)] = counts.get(str(r.version), 0) + 1
        latency.setdefault(r.window, []).append(r.at - r.sent_at)
    windows = [
        {"window": w, "segment": SEGMENTS[trace.segment_of(w)], "scene": trace.scene(w),
         "start_at": run.starts[w] if w < len(run.starts) else None,
         "sent": run.sent[w] if w < len(run.sent) else 0,
         "failed": run.failed[w] if w < len(run.failed) else 0,
         "answered_by": versions.get(w, {}),
         "latency_p50_s": float(np.median(latency[w])) if w in latency else None,
         "latency_max_s": max(latency[w]) if w in latency else None,
         "behind_schedule_s": run.starts[w] - run.starts[0] - w * run.settings.window_s
         if w < len(run.starts) else None,
         "deepedge": value(m.served[w]), "no_update": value(m.no_update[w]),
         "reference": value(m.reference[w])}
        for w in range(trace.windows)
    ]  # fmt: skip
    return {
        "part": run.part,
        "workload": run.workload.name,
        "deployment": run.workload.spec,
        "window_s": run.settings.window_s,
        "rate": run.settings.rate,
        "startup_s": run.startup_s,
        "windows": windows,
        "decisions": [
            {"window": window_of(v.decision.at, run.starts), "at": v.decision.at,
             "kind": v.decision.kind.value, "chosen": v.decision.chosen,
             "alternative": v.decision.alternative, "judged_on": list(v.windows),
             "chosen_accuracy": value(v.chosen_accuracy),
             "alternative_accuracy": value(v.alternative_accuracy), "wrong": v.wrong,
             "message": v.decision.message}
            for v in m.verdicts
        ],
        "updates": [
            {"version": u.version, "window": window_of(u.triggered_at, run.starts),
             "triggered_at": u.triggered_at, "answered_at": u.answered_at,
             "seconds": u.seconds, "outcome": u.outcome}
            for u in m.updates
        ],
        "labels": run.labels,
        "evicted_samples": run.evicted,
        "figures": {k: value(float(v)) for k, v in m.figures.items()},
        "events": run.events,
    }  # fmt: skip


def write_record(out: Path, measured: Mapping[str, Measured]) -> None:
    """``accuracy.json``, a plot per workload, every run's downloaded models and its
    answered requests (``requests-<part>.jsonl``) under ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    document = {part: record(m) for part, m in measured.items()}
    (out / "accuracy.json").write_text(json.dumps(document, indent=1))
    for part, m in measured.items():
        if part in {"main", "resnet"}:
            plot(document[part], out / f"accuracy-{m.run.workload.name}.png")
        models = out / "models" / part
        models.mkdir(parents=True, exist_ok=True)
        for path in m.run.models.values():
            shutil.copy2(path, models / path.name)
        with (out / f"requests-{part}.jsonl").open("w") as f:
            for r in m.run.requests:
                f.write(json.dumps(dataclasses.asdict(r)) + "\n")


SHORT = {"promotion": "promoted", "canary-promotion": "canary promoted",
         "restore": "restored", "rollback": "rolled back to",
         "canary-rollback": "canary lost; kept"}  # fmt: skip
COLOURS = {"promotion": "tab:purple", "canary-promotion": "tab:purple",
           "restore": "tab:orange", "rollback": "black", "canary-rollback": "black"}  # fmt: skip


def plot(document: Mapping[str, Any], path: Path) -> None:
    """One run's :func:`record` drawn: served accuracy per window beside the two
    references, the segments shaded, the decisions marked (dotted: judged wrong)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    windows = document["windows"]
    x = np.arange(len(windows))

    def series(key: str) -> np.ndarray:
        return np.array([np.nan if w[key] is None else w[key] for w in windows])

    fig, ax = plt.subplots(figsize=(11, 4.4), dpi=110)
    for k, name in enumerate(SEGMENTS):
        inside = [w["window"] for w in windows if w["segment"] == name]
        if inside:
            ax.axvspan(inside[0] - 0.5, inside[-1] + 0.5, color="0.93" if k % 2 else "white",
                       zorder=0)  # fmt: skip
            ax.text((inside[0] + inside[-1]) / 2, 0.03, name, ha="center", fontsize=9,
                    color="0.35")  # fmt: skip
    ax.plot(x, series("reference"), color="tab:green", lw=1.4, label="offline reference")
    ax.plot(x, series("deepedge"), color="tab:blue", lw=1.8, marker=".",
            label="deepedge (served)")  # fmt: skip
    ax.plot(x, series("no_update"), color="tab:red", lw=1.2, ls="--", label="no update (v1)")
    for d in document["decisions"]:
        colour = COLOURS[d["kind"]]
        ax.axvline(d["window"] + 0.5, color=colour, lw=0.9, ls=":" if d["wrong"] else "-")
        ax.text(d["window"] + 0.7, 0.42, f"{SHORT[d['kind']]} v{d['chosen']}"
                + (" (wrong)" if d["wrong"] else ""), rotation=90, fontsize=7,
                va="bottom", color=colour)  # fmt: skip
    ax.set_ylim(0, 1.02)
    ax.set_xlim(-0.5, len(windows) - 0.5)
    ax.set_xlabel(f"window ({document['window_s']:g} s, "
                  f"{round(document['rate'] * document['window_s'])} requests)")  # fmt: skip
    ax.set_ylabel("accuracy (true labels)")
    ratio = document["figures"].get("acc_ratio")
    ax.set_title(f"{document['workload']} ({document['part']} run): served accuracy per window"
                 f", acc_ratio {_f(ratio if ratio is not None else math.nan)}",
                 fontsize=10)  # fmt: skip
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.14), fontsize=8, ncols=3,
              frameon=False)  # fmt: skip
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)

"""Record the Ekya trace from real training runs: ``python -m deepedge.bench.ekya_record``.

Runs :func:`deepedge.sim.recorded.record_stream` for the twelve streams of
:func:`~deepedge.sim.recorded.default_streams` (10 test, 2 hold-out), each in its own worker
process with one torch thread, and writes the trace JSON (``--out``, default
``ekya_recorded_trace.json`` in the working directory; it never writes into the installed
package: to replace the committed trace of a source checkout, pass
``--out src/deepedge/sim/data/ekya_recorded_trace.json``) with its provenance (command, seed, date,
machine, wall seconds). With ``--workers 2`` it took 350 s of wall time on a quiet 2-core
x86_64 machine (and 1354 s for the earlier, unchained version under heavy load); with the
two further profiles of every configuration (``reprofiled_accuracy_after``) 438 s at a load
average of 4-8, and 233 s at 2-4 with CPU seconds and the disjoint validation images
(2026-11-25). Measured
seconds (``gpu_seconds``, ``estimated_gpu_seconds``, ``profiling_s``) are CPU seconds of the
worker's one torch thread (wall seconds until 2026-11-25, which followed the machine's load);
they still depend on the machine, so the window length ``T`` is derived from them
(``window_length_s``) unless ``--window-s`` is given; accuracies depend on the seed and the
code only (two recordings of the same code gave identical accuracies).
"""

from __future__ import annotations

import argparse
import datetime as dt
import multiprocessing
import shlex
import sys
import time
from pathlib import Path

from deepedge.bench.harness.report import machine_description
from deepedge.sim.recorded import (
    A_MIN,
    RECORDED_TRACE,
    RecordSpec,
    assemble_trace,
    default_streams,
    load_recorded_trace,
    one_thread_floor,
    one_thread_record,
)
from deepedge.sim.trace import EkyaTrace

DEFAULT_OUT = Path(RECORDED_TRACE)  # the working directory, never the installed package


def record(
    workers: int,
    windows: int,
    seed: int,
    only: list[str] | None,
    window_s: float | None,
    command: str,
    samples_scale: float = 1.0,
) -> EkyaTrace:
    specs = [s for s in default_streams() if only is None or s.stream_id in only]
    spec = RecordSpec(windows=windows, seed=seed, samples_scale=samples_scale)
    t0 = time.perf_counter()
    if workers > 1:
        with multiprocessing.get_context("spawn").Pool(workers) as pool:
            recorded = pool.starmap(one_thread_record, [(s, spec) for s in specs])
    else:
        recorded = [one_thread_record(s, spec) for s in specs]
    wall = time.perf_counter() - t0
    provenance = {
        "command": command,
        "seed": str(seed),
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "machine": machine_description(),
        "wall_s": f"{wall:.1f}",
        "workers": str(workers),
        "samples_scale": str(samples_scale),
        "generator": "deepedge.sim.recorded (real torch runs; see its docstring)",
    }
    return assemble_trace(specs, recorded, window_s, 2.0, seed, provenance)


def refresh_floors(path: Path, workers: int, command: str) -> EkyaTrace:
    """Re-measure ``floor_accuracy`` of every stream of the trace at ``path`` (cheap: the
    initial models only) and set ``a_min`` to ``A_MIN``; the retraining rows are kept."""
    trace = load_recorded_trace(path)
    specs = {s.stream_id: s for s in default_streams()}
    provenance = trace.provenance or {}
    spec = RecordSpec(
        windows=len(trace.windows),
        seed=int(provenance["seed"]),
        samples_scale=float(provenance.get("samples_scale", "1")),
    )
    todo = [(specs[s.stream_id], spec) for s in trace.streams]
    with multiprocessing.get_context("spawn").Pool(max(1, workers)) as pool:
        floors = pool.starmap(one_thread_floor, todo)
    streams = [
        s.model_copy(update={"floor_accuracy": round(f, 6)})
        for s, f in zip(trace.streams, floors, strict=True)
    ]
    provenance = dict(trace.provenance or {})
    provenance["floors"] = f"{command} at {dt.datetime.now(dt.UTC):%Y-%m-%dT%H:%M:%SZ}"
    return EkyaTrace.model_validate(
        trace.model_dump() | {"streams": streams, "a_min": A_MIN, "provenance": provenance}
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--windows", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--window-s",
        type=float,
        default=None,
        help="window length T (default: 2 x the median cost of e8-f100-all, see sim/recorded.py)",
    )
    parser.add_argument("--streams", nargs="*", default=None, help="stream ids (default: all)")
    parser.add_argument(
        "--samples-scale",
        type=float,
        default=1.0,
        help="multiply every stream's window size (default 1: 200-800 images)",
    )
    parser.add_argument(
        "--floors-only", action="store_true", help="only re-measure the floors of --out"
    )
    args = parser.parse_args(argv)
    command = "python -m deepedge.bench.ekya_record " + shlex.join(
        sys.argv[1:] if argv is None else argv
    )
    if args.floors_only:
        trace = refresh_floors(args.out, args.workers, command)
    else:
        trace = record(
            args.workers,
            args.windows,
            args.seed,
            args.streams,
            args.window_s,
            command,
            args.samples_scale,
        )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(trace.model_dump_json(indent=1, exclude_none=True) + "\n")
    print(f"wrote {args.out}: {len(trace.streams)} streams x {len(trace.windows)} windows")
    for s in trace.streams:
        drifts = [r.drift for w in trace.windows for r in w.streams if r.stream_id == s.stream_id]
        print(
            f"{s.stream_id}: initial {s.initial_accuracy:.3f} drift {[round(d, 3) for d in drifts]}"
        )


if __name__ == "__main__":
    main()

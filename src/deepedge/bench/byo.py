"""Bring your own model: ``python -m deepedge.bench.byo [--quick]``.

Four workloads written as a site would bring them (:mod:`deepedge.bench.byo_parts`: a
BatchNorm CNN, its TorchScript export, a tabular MLP with text labels, a GroupNorm CNN on a
stream, on drifting scikit-image photos and the breast-cancer table) go through what a user
runs, in named stages:

1. **check** every workload (``workload check``: the probe on a real batch);
2. **mistakes**: the planted mistakes (:func:`deepedge.bench.byo_parts.plant_mistakes`);
   each must fail the check naming its field, or be warned with its figures, or fail the
   update at once, or be refused by the service; one that passes silently is a
   ``silent_failure``;
3. **update** each workload once on its last window (``deepedge update``: the asynchronous
   parameter server on the emulated testbed), and read its ``model.pt`` back;
4. **deploy** all four on the embedded default (one service on loopback, SQLite) for one
   deployment cycle each: first version, windows served, the drift's trigger, the update
   job, its gate and canary; then download every version through the API and load it with
   plain torch (``torch.load`` into the user's model, or ``torch.jit.load``).

Measured: ``bn_served_vs_plain``: the BatchNorm deployment's first version, its served
accuracy (the control plane's window scores) over what plain torch gives with the same
downloaded weights on the same samples; ``roundtrip_ok``: every export (update's
``model.pt``, every version downloaded, the TorchScript export a data plane serves) loads
back with outputs identical to the model deepedge scored (the TorchScript export: within
1e-5); ``tabular_recovered``: the tabular deployment's served accuracy on drifted windows
after its update over its served accuracy before the drift. ``--quick`` (tests) runs
stages 1-2 and a local round trip on toy data: no Ray, no service.

Last line: ``RESULT workloads=... bn_served_vs_plain=... roundtrip_ok=...
tabular_recovered=... silent_failures=...``.
"""

from __future__ import annotations

import argparse
import io
import json
import logging
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from deepedge.bench.byo_parts import (
    TABLE_ONSET,
    Mistake,
    plant_mistakes,
    write_workloads,
)
from deepedge.bench.harness.report import machine_description, result_line, table
from deepedge.core.errors import DeepEdgeError

log = logging.getLogger(__name__)

TOKEN = "tok-byo"
NO_TRAFFIC_S = 300.0  # the deployment cycle gives up when no window was scored by then
KEYS = ("workloads", "bn_served_vs_plain", "roundtrip_ok", "tabular_recovered",
        "silent_failures")  # fmt: skip


# -- 1. check --------------------------------------------------------------------------


def check_all(workloads: dict[str, Path]) -> dict[str, dict[str, Any]]:
    from deepedge.workload.check import summary

    return {name: summary(str(path)) for name, path in workloads.items()}


# -- 2. planted mistakes -----------------------------------------------------------------


def judge_check(mistake: Mistake) -> tuple[bool, str]:
    """Whether the check said it (an error naming the field, or a warning with the text)."""
    from deepedge.workload.check import summary

    try:
        out = summary(str(mistake.document))
    except DeepEdgeError as exc:
        field = getattr(exc, "field", None)
        ok = mistake.expect == "check" and field == mistake.field
        return ok, f"check error ({field}): {exc.message[:90]}"
    warnings = [w for w in out["warnings"] if mistake.text and mistake.text in w]
    if mistake.expect == "warning" and warnings:
        return True, f"check warning: {warnings[0][:90]}"
    return False, "passed the check silently"


def judge_update(mistake: Mistake, out: Path) -> tuple[bool, str]:
    """A mistake the check cannot see (a learning rate that diverges): the update must fail
    at once with the cause, or say that the model learned nothing."""
    from deepedge.runtime.training.testbed import paper_testbed
    from deepedge.runtime.training.workload_update import training_config, update_workload
    from deepedge.workload.resolve import load_workload

    workload = load_workload(str(mistake.document))
    started = time.perf_counter()
    try:
        update = update_workload(workload, paper_testbed(1, 6), out / mistake.name,
                                 config=training_config(workload, max_epochs=6))  # fmt: skip
    except DeepEdgeError as exc:
        return (
            True,
            f"update failed after {time.perf_counter() - started:.0f} s: {exc.message[:80]}",
        )
    warnings = [w for w in update.summary(workload)["warnings"] if "at chance" in w]
    if warnings:
        return True, f"update warned: {warnings[0][:90]}"
    return False, f"trained to {update.metric_after:.3f} without a word"


# -- 3. update ---------------------------------------------------------------------------


def update_all(workloads: dict[str, Path], out: Path) -> dict[str, dict[str, Any]]:
    from deepedge.runtime.training.testbed import paper_testbed
    from deepedge.runtime.training.workload_update import (
        save_update,
        training_config,
        update_workload,
    )
    from deepedge.workload.resolve import load_workload

    results = {}
    for name, path in workloads.items():
        workload = load_workload(str(path))
        started = time.perf_counter()
        update = update_workload(workload, paper_testbed(1, 10), out / name / "checkpoints",
                                 config=training_config(workload, max_epochs=10))  # fmt: skip
        summary = save_update(update, workload, out / name)
        summary["wall_s"] = time.perf_counter() - started
        results[name] = summary
    return results


# -- 4. deploy ---------------------------------------------------------------------------


def deployment(name: str, workload: Path, window_s: float, threshold: float) -> dict[str, Any]:
    return {
        "name": name,
        "workload": str(workload),
        "window_s": window_s,
        "base_windows": 2,
        "base_epochs": 6,
        "trigger": {"sample_count": None, "accuracy_threshold": threshold, "cooldown_windows": 2},
        "update": {"epochs": 6, "recent_windows": 2, "label_fraction": 1.0},
        "canary": {"fraction": 0.5, "windows": 1},
        "gate": {"min_gain": 0.0, "rollback_tolerance": 0.05},
        # four deployments' replicas share the embedded data plane's cores
        "serving": {"replicas": 1, "cpus": SERVING_CPUS, "sample_fraction": 1.0},
    }


SERVING_CPUS = 0.25  # each replica's CPU share: 4 x 1 CPU would not fit 2 cores
CAMERA_RATE = 6.0  # requests a second per deployment: at 4 x 20 the data plane took both
# cores and the niced update jobs' embedded Ray did not start
THRESHOLDS = {"bn-cnn": 0.8, "torchscript": 0.8, "tabular": 0.9, "gn-cnn": 0.8}


@dataclass(frozen=True)
class TableCamera:
    """Which of the table's windows the tabular camera was sending during a deployment
    window: the camera starts at the table's window 0 once the endpoint answers (``started``,
    wall time), some deployment windows after the deployment's window 0, and sends each
    table window for ``window_s``, ``n`` windows in a cycle."""

    started: float | None
    window_s: float
    n: int

    def table_window(self, window: dict[str, Any]) -> int | None:
        """The table window sent at the middle of the deployment's ``window`` (None before
        the camera began)."""
        middle = window["due_at"] - self.window_s / 2
        if self.started is None or middle < self.started:
            return None
        return int((middle - self.started) // self.window_s) % self.n

    def windows(self, windows: list[dict[str, Any]], *, drifted: bool, served: int | None = None
                ) -> list[dict[str, Any]]:  # fmt: skip
        """Scored windows of the table's clean part (``drifted`` False: before the onset) or
        of its fully drifted part (after the onset window and the next), served by version
        ``served`` (None: any version >= 2)."""
        out = []
        for w in windows:
            k = self.table_window(w)
            version = w["served_version"] or 1
            if k is None or w["accuracy"] is None:
                continue
            if (version >= 2 if served is None else version == served) and (
                k > TABLE_ONSET + 1 if drifted else k <= TABLE_ONSET
            ):
                out.append(w)
        return out


def _cycle_done(view: dict[str, Any], name: str, table: TableCamera | None) -> bool:
    """One deployment cycle: an update trained and reached its gate's or canary's verdict
    (and, for the tabular one, its version served drifted windows) after windows were
    served. A version that failed (an update asked for before its windows held enough
    samples, a job that did not start) is not a cycle: the next trigger's is awaited."""
    verdicts = {"SERVING", "RETIRED", "REJECTED", "ROLLED_BACK"}
    decided = [v for v in view["versions"] if v["version"] >= 2 and v["status"] in verdicts]
    if not decided:
        return False
    if name != "tabular" or table is None:
        return True
    return len(table.windows(view["windows"], drifted=True)) >= 2 or any(
        v["status"] == "REJECTED" for v in decided
    )


def deploy_all(
    workloads: dict[str, Path], folder: Path, window_s: float, timeout_s: float
) -> dict[str, Any]:
    import httpx

    from deepedge.bench.harness.cameras import StreamCameras
    from deepedge.bench.harness.http import Client, bearer
    from deepedge.bench.harness.site import Tenant, site_settings, start_service

    settings = site_settings(folder / "service")
    shutil.rmtree(settings.data_dir, ignore_errors=True)  # a previous run's service (--out)
    # The tenant's workloads are read in its sandbox: the operator grants it what the run
    # wrote, but not the service's own folder beside it (a grant that holds the service's
    # data is not given: the tenant would see no workload at all).
    grants = tuple(str(p) for p in sorted(folder.iterdir()) if p != settings.data_dir)
    tenant = Tenant("byo", TOKEN, grants, quota={"max_active_jobs": 2, "max_cores": 4.0})
    server = start_service(settings, [tenant], timeout_s=180.0)
    windows_of = {name: json.loads(p.read_text()) for name, p in workloads.items()}
    try:
        with httpx.Client(base_url=server.url, headers=bearer(TOKEN), timeout=300.0,
                          trust_env=False) as client:  # fmt: skip
            specs = {}
            for name, path in workloads.items():
                specs[name] = deployment(name, path, window_s, THRESHOLDS[name])
                answer = client.post("/v1/deployments", json=specs[name])
                answer.raise_for_status()
            duplicate = _duplicate(client, specs["bn-cnn"])
            # each deployment's camera sends its workload's windows, labelled (feedback)
            cameras = StreamCameras(Client(server.url, TOKEN), list(specs.values()), CAMERA_RATE)
            started, views = time.monotonic(), {}
            n_table = _table_windows(windows_of["tabular"], folder)

            def table() -> TableCamera:
                return TableCamera(cameras.started.get("tabular"), window_s, n_table)

            while time.monotonic() - started < timeout_s:
                views = {n: client.get(f"/v1/deployments/{n}").json() for n in workloads}
                if time.monotonic() - started > NO_TRAFFIC_S and not any(
                    w["accuracy"] is not None for v in views.values() for w in v["windows"]
                ):
                    raise RuntimeError(
                        f"no window of live traffic was scored in {NO_TRAFFIC_S:.0f} s: the "
                        "cameras reach no endpoint (is the data plane up?)"
                    )
                if all(_cycle_done(views[n], n, table() if n == "tabular" else None)
                       for n in workloads):  # fmt: skip
                    break
                time.sleep(5.0)
            downloads = {
                name: {v["version"]: client.get(
                    f"/v1/deployments/{name}/versions/{v['version']}/model")
                       for v in view["versions"] if v["status"] not in {"TRAINING", "FAILED"}}
                for name, view in views.items()
            }  # fmt: skip
            cameras.stop()
            for name in workloads:
                client.post(f"/v1/deployments/{name}/stop")
    finally:
        server.stop()
    return {"views": views, "downloads": downloads, "duplicate": duplicate,
            "settings": settings, "elapsed_s": time.monotonic() - started,
            "table": table()}  # fmt: skip


def _table_windows(doc: dict[str, Any], folder: Path) -> int:
    return len(list((folder / doc["data"]["path"]).glob("*.csv")))


def _duplicate(client: Any, spec: dict[str, Any]) -> tuple[bool, str]:
    """The same name with a changed spec is refused with the way out; the same spec again
    is the same deployment."""
    changed = client.post("/v1/deployments", json={**spec, "window_s": spec["window_s"] + 1})
    same = client.post("/v1/deployments", json=spec)
    ok = (changed.status_code == 409 and "another spec" in changed.text
          and same.status_code == 200)  # fmt: skip
    return ok, f"changed spec: {changed.status_code} {changed.json().get('message', '')[:70]}"


# -- measures ----------------------------------------------------------------------------


def served_vs_plain(cycle: dict[str, Any], name: str, folder: Path) -> float:
    """The first version's served accuracy over plain torch's with its downloaded weights,
    on the same labelled requests: every sample of live traffic the data plane answered
    with version 1 (its prediction as returned), and the plain model on the sample's input."""
    import torch

    from deepedge.dataplane.sample_store import SampleStore, sample_store_path

    view = cycle["views"][name]
    model = _plain_model(name, folder, cycle["downloads"][name][1].content)
    store = SampleStore(sample_store_path(cycle["settings"].data_dir))
    samples = [s for s in store.window(view["id"], 0.0, float("inf"))
               if s.version == 1 and s.label is not None]  # fmt: skip
    store.close()
    if not samples:
        return float("nan")
    labels = np.array([s.label for s in samples])
    served = np.array([s.prediction for s in samples])
    with torch.no_grad():
        plain = model(torch.as_tensor(np.stack([s.input for s in samples]))).argmax(dim=1)
    return float(np.mean(served == labels) / max(np.mean(plain.numpy() == labels), 1e-9))


def _plain_model(name: str, folder: Path, body: bytes) -> Any:
    """A downloaded version read as a user would: ``torch.jit.load``, or ``torch.load``
    into the user's own model class (no deepedge code)."""
    import importlib

    import torch

    if name == "torchscript":
        return torch.jit.load(io.BytesIO(body)).eval()
    sys.path.insert(0, str(folder / "site"))
    models = importlib.import_module("site_models")
    model = {"bn-cnn": lambda: models.CamNet(6), "gn-cnn": lambda: models.group_cam(6),
             "tabular": lambda: models.TableNet(34, 2)}[name]()  # fmt: skip
    model.load_state_dict(torch.load(io.BytesIO(body), weights_only=True))
    return model.eval()


def _export_answers_alike(model: Any, example: Any) -> bool:
    """Whether ``model``'s export for serving (the checked ONNX graph, run by ONNX
    Runtime) answers ``example`` like the model."""
    import torch

    from deepedge.controlplane.artifacts import export_served
    from deepedge.dataplane.served_graph import GraphSession
    from deepedge.learning.export import ServedModel

    with torch.no_grad():
        expected = model(example).numpy()
    served = ServedModel(tuple(example.shape[1:]), tuple(map(str, range(expected.shape[1]))))
    graph = GraphSession(export_served(model, example, served), served.input_shape,
                         expected.shape[1])  # fmt: skip
    return bool(np.allclose(graph.run(example.numpy()), expected, atol=1e-4, rtol=1e-3))


def roundtrips(cycle: dict[str, Any], workloads: dict[str, Path], folder: Path) -> list[bool]:
    """Every downloaded version against deepedge's own load of the stored artifact, and its
    export for serving, on a real batch."""
    import torch

    from deepedge.controlplane.artifacts import load_version
    from deepedge.controlplane.deployment_spec import DeploymentSpec
    from deepedge.workload.resolve import load_workload

    checks = []
    for name, versions in cycle["downloads"].items():
        view = cycle["views"][name]
        spec = DeploymentSpec.model_validate(view["spec"])
        example = load_workload(str(workloads[name])).example_batch()
        folder_of = cycle["settings"].data_dir / "deployments"
        for number, answer in versions.items():
            if answer.status_code != 200:
                checks.append(False)
                continue
            (artifact,) = folder_of.glob(f"*/{view['id']}/v{number}.pt")
            served = load_version(spec, artifact)
            plain = _plain_model(name, folder, answer.content)
            with torch.no_grad():
                checks.append(bool(torch.equal(plain(example), served(example))))
            checks.append(_export_answers_alike(served, example))
    return checks


def tabular_recovered(cycle: dict[str, Any]) -> float:
    view, table = cycle["views"]["tabular"], cycle["table"]
    before = [w["accuracy"] for w in table.windows(view["windows"], drifted=False, served=1)]
    after = [w["accuracy"] for w in table.windows(view["windows"], drifted=True)]
    if not before or not after:
        return float("nan")
    return float(np.mean(after) / np.mean(before))


# -- quick: a local round trip -----------------------------------------------------------


def local_roundtrips(workloads: dict[str, Path], out: Path) -> list[bool]:
    """Without Ray or a service: each workload's model trained one epoch in plain torch,
    written as a version and read back by deepedge and by plain torch."""
    import torch

    from deepedge.controlplane.artifacts import write_version
    from deepedge.learning.model_state import read_model_file
    from deepedge.learning.training import train_epochs
    from deepedge.workload.model import local_training
    from deepedge.workload.resolve import load_workload

    checks = []
    for name, path in workloads.items():
        workload = load_workload(str(path))
        model = workload.model_factory()
        data = workload.window(0)
        train_epochs(model, data.images, data.labels, 1, local_training(workload.spec.training))
        model.eval()
        write_version(out / f"{name}.pt", model)
        example = workload.example_batch()
        back = read_model_file(out / f"{name}.pt", workload.model_factory).eval()
        with torch.no_grad():
            checks.append(bool(torch.equal(back(example), model(example))))
        checks.append(_export_answers_alike(model, example))
    return checks


# -- main --------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m deepedge.bench.byo")
    parser.add_argument("--quick", action="store_true", help="checks and a local round trip")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=None, help="keep the files here")
    parser.add_argument("--window-s", type=float, default=12.0, help="deployment windows")
    parser.add_argument("--timeout-s", type=float, default=1800.0, help="deployment cycle")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    with tempfile.TemporaryDirectory(prefix="deepedge-byo-") as tmp:
        folder = args.out or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        return run(folder, args)


def run(folder: Path, args: argparse.Namespace) -> int:
    print(f"machine: {machine_description()}")
    workloads = write_workloads(folder, quick=args.quick, seed=args.seed)
    checks = check_all(workloads)
    print(table(["workload", "classes", "input", "parameters", "buffers", "format", "warnings"],
                [[n, len(c["classes"]), "x".join(map(str, c["input"]["shape"])),
                  c["parameters"], len(c["buffers"]), c["model_format"], len(c["warnings"])]
                 for n, c in checks.items()]))  # fmt: skip
    mistakes = plant_mistakes(folder, workloads)
    verdicts: dict[str, tuple[bool, str]] = {}
    for m in mistakes:
        if m.expect in {"check", "warning"}:
            verdicts[m.name] = judge_check(m)
    values: dict[str, Any] = {"workloads": len(checks)}
    if args.quick:
        values["roundtrip_ok"] = int(all(local_roundtrips(workloads, folder)))
    else:
        from deepedge.runtime.cluster.session import ray_session

        with ray_session(2):
            updates = update_all(workloads, folder / "updates")
            for m in mistakes:
                if m.expect == "update":
                    verdicts[m.name] = judge_update(m, folder / "mistakes")
        print(table(["workload", "before", "after", "epochs", "stop", "model.pt", "s"],
                    [[n, u["metric_before"], u["metric_after"], len(u["validation_accuracies"]),
                      u["stop_reason"], u["model_file"]["format"], u["wall_s"]]
                     for n, u in updates.items()]))  # fmt: skip
        cycle = deploy_all(workloads, folder, args.window_s, args.timeout_s)
        verdicts["duplicate-deployment"] = cycle["duplicate"]
        trips = [u["model_file"]["round_trip"] for u in updates.values()]
        trips += roundtrips(cycle, workloads, folder)
        print(table(["deployment", "status", "serving", "windows", "versions"],
                    [[n, v["status"], v["serving_version"], len(v["windows"]),
                      " ".join(f"v{x['version']}:{x['status']}" for x in v["versions"])]
                     for n, v in cycle["views"].items()]))  # fmt: skip
        print(f"deployment cycle: {cycle['elapsed_s']:.0f} s")
        values["bn_served_vs_plain"] = served_vs_plain(cycle, "bn-cnn", folder)
        values["roundtrip_ok"] = int(bool(trips) and all(trips))
        values["tabular_recovered"] = tabular_recovered(cycle)
    print(
        table(
            ["mistake", "said", "how"],
            [[n, "yes" if ok else "SILENT", how] for n, (ok, how) in verdicts.items()],
        )
    )
    values["silent_failures"] = sum(1 for ok, _ in verdicts.values() if not ok)
    values["mistakes"] = len(verdicts)
    print(result_line(values))
    return 0


if __name__ == "__main__":
    sys.exit(main())

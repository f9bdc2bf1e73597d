"""Attacks of ``python -m deepedge.bench.isolation`` through the API: workloads checked at
submission (their entry points, model files, labellers, CSV and folder paths), the control
loop, and requests a hostile tenant can craft. The stage that sets the arena up (alice's
secret, bob's package) is here too."""

from __future__ import annotations

import json
import textwrap
import time
from pathlib import Path
from typing import Any

import numpy as np

from deepedge.bench.isolation_attacks import Arena, Outcome, ProbeAttack
from deepedge.bench.isolation_loop import furnish_loop, loop_attacks
from deepedge.bench.isolation_models import furnish_models, model_attacks

EVIL_PACKAGE = textwrap.dedent(
    """
    import numpy as np
    import torch
    from torch import nn


    class Tiny(nn.Module):
        def __init__(self, classes=2, channels=3):
            super().__init__()
            self.features = nn.Sequential(nn.Conv2d(channels, 4, 3, padding=1), nn.ReLU(),
                                          nn.AdaptiveAvgPool2d(2))
            self.head = nn.Linear(16, classes)

        def forward(self, x):
            return self.head(torch.flatten(self.features(x), 1))


    def touch_host(path):
        # a host file: it can be written only where this runs outside a sandbox; in one
        # the folder does not exist, and the code goes on as if nothing happened
        try:
            open(path, "w").write("pwned")
        except OSError:
            pass


    def peek(paths):
        # the service's files: readable only where this runs outside a sandbox; what it
        # reads leaves as an error message (which the tenant reads back as an event)
        found = []
        for path in paths or ():
            try:
                with open(path, "rb") as handle:
                    found.append(handle.read(64).decode("latin-1"))
            except OSError:
                pass
        if found:
            raise ValueError("leaked: " + " | ".join(found))


    def make(classes=2, channels=3, touch=None, peek_at=None):
        if touch:
            touch_host(touch)
        peek(peek_at)
        return Tiny(classes, channels)


    def read_secret(path):
        raise ValueError("leaked: " + open(path).read())


    def labeller(touch=None, peek_at=None):
        def label(images):
            if touch:
                touch_host(touch)
            peek(peek_at)
            return np.zeros(len(images), dtype=np.int64)

        return label
    """
)


def write_images(root: Path, windows: int = 2, per_class: int = 4, size: int = 12) -> None:
    """``root/<window>/<class>/<n>.png``: tiny colour images of two classes."""
    from PIL import Image

    rng = np.random.default_rng(0)
    for w in range(windows):
        for c, name in enumerate(("blue", "red")):
            folder = root / f"{w:03d}" / name
            folder.mkdir(parents=True, exist_ok=True)
            for i in range(per_class):
                img = rng.uniform(0.0, 0.4, size=(size, size, 3))
                img[..., 0 if name == "red" else 2] += 0.5
                Image.fromarray((np.clip(img, 0, 1) * 255).astype(np.uint8)).save(
                    folder / f"{c}-{i}.png"
                )


def furnish(arena: Arena) -> None:
    """Bob's granted folder: his package (``evil``), his images, a CSV whose rows are
    alice's files, and a ``sitecustomize`` that writes a host file wherever Python imports
    it outside a sandbox; alice's: her secret and her images."""
    bob, alice = arena.attacker_grant, arena.victim_grant
    (bob / "evil").mkdir(parents=True, exist_ok=True)
    (bob / "evil" / "__init__.py").write_text("")
    (bob / "evil" / "models.py").write_text(EVIL_PACKAGE)
    write_images(bob / "images")
    write_images(alice / "images")
    (alice / "secret.txt").write_text(arena.secret)
    rows = ["path,label,timestamp"] + [
        f"{p},{p.parent.name},{n}" for n, p in enumerate(sorted((alice / "images").rglob("*.png")))
    ]
    (bob / "alice.csv").write_text("\n".join(rows) + "\n")
    target = arena.host_file("pwned-by-pythonpath")
    (bob / "sitecustomize.py").write_text(
        f"try:\n    open({str(target)!r}, 'w').write('pwned')\nexcept OSError:\n    pass\n"
    )
    furnish_models(arena)
    furnish_loop(arena)
    for folder in (bob, alice, *bob.rglob("*"), *alice.rglob("*")):
        folder.chmod(0o755 if folder.is_dir() else 0o644)  # readable by their sandboxes


def workload(arena: Arena, **overrides: Any) -> dict[str, Any]:
    """Bob's workload document (inline, absolute paths), with ``overrides``."""
    doc: dict[str, Any] = {
        "name": "bobs-cams",
        "python_path": [str(arena.attacker_grant)],
        "model": {"entry_point": "evil.models:make", "kwargs": {"classes": 2, "channels": 3}},
        "input": {"size": [12, 12], "channels": 3},
        "data": {"kind": "folder", "root": str(arena.attacker_grant / "images")},
    }
    doc.update(overrides)
    return doc


def _job_with(arena: Arena, document: dict[str, Any]) -> tuple[int, str]:
    manifest = {"name": "upd", "kind": "model-update", "spec": {"document": document}}
    response = arena.submit(manifest)
    return response.status_code, response.text


def _check_writes_host(arena: Arena) -> Outcome:
    target = arena.host_file("pwned-at-check")
    model = {"entry_point": "os:system", "kwargs": {"command": f"touch {target}"}}
    status, _ = _job_with(arena, {"workload": workload(arena, model=model), "epochs": 1})
    return Outcome(target.exists(), f"{target} written (answer {status})" if target.exists()
                   else f"answer {status}, nothing written")  # fmt: skip


def _check_leaks_secret(arena: Arena) -> Outcome:
    model = {"entry_point": "evil.models:read_secret",
             "kwargs": {"path": str(arena.victim_grant / "secret.txt")}}  # fmt: skip
    status, text = _job_with(arena, {"workload": workload(arena, model=model), "epochs": 1})
    leaked = arena.secret in text
    return Outcome(leaked, f"the secret in the {status} answer" if leaked else f"answer {status}")


def _model_file_is_the_store(arena: Arena) -> Outcome:
    model = {"torchscript": str(arena.data_dir / "service.db")}
    status, text = _job_with(arena, {"workload": workload(arena, model=model), "epochs": 1})
    return Outcome(status < 400 or "SQLite" in text, f"answer {status}")


def _folder_of_another_tenant(arena: Arena) -> Outcome:
    data = {"kind": "folder", "root": str(arena.victim_grant / "images")}
    status, _ = _job_with(arena, {"workload": workload(arena, data=data), "epochs": 1})
    return Outcome(status < 400, f"answer {status}")


def _csv_rows_of_another_tenant(arena: Arena) -> Outcome:
    data = {"kind": "csv", "manifest": str(arena.attacker_grant / "alice.csv"), "window_s": 1}
    status, _ = _job_with(arena, {"workload": workload(arena, data=data), "epochs": 1})
    return Outcome(status < 400, f"answer {status} (alice's images read)" if status < 400
                   else f"answer {status}")  # fmt: skip


def _deployment_check_writes_host(arena: Arena) -> Outcome:
    target = arena.host_file("pwned-at-deployment-check")
    model = {"entry_point": "os:system", "kwargs": {"command": f"touch {target}"}}
    spec = {"name": "bob-cams", "window_s": 5, "workload": workload(arena, model=model)}
    with arena.client() as client:
        status = client.post("/v1/deployments", json=spec).status_code
    return Outcome(target.exists(), f"{target} written (answer {status})" if target.exists()
                   else f"answer {status}, nothing written")  # fmt: skip


def _code_in_the_control_loop(arena: Arena) -> Outcome:
    """A workload that passes its check (its model and labeller are well-formed) and
    writes a host file whenever its model or labeller runs: in the check's sandbox that
    file is out of reach; the control loop then serves and labels the deployment."""
    target = arena.host_file("pwned-in-control-loop")
    doc = workload(
        arena,
        model={"entry_point": "evil.models:make",
               "kwargs": {"classes": 2, "channels": 3, "touch": str(target)}},
        labeller={"kind": "entry-point", "entry_point": "evil.models:labeller",
                  "kwargs": {"touch": str(target)}},
    )  # fmt: skip
    spec = {"name": "bob-loop", "window_s": 5, "workload": doc}
    with arena.client() as client:
        status = client.post("/v1/deployments", json=spec).status_code
        deadline = time.monotonic() + 90
        while status < 400 and time.monotonic() < deadline and not target.exists():
            time.sleep(1.0)
        client.delete("/v1/deployments/bob-loop", params={"confirm": "bob-loop"})
    return Outcome(target.exists(), f"{target} written by the control loop" if target.exists()
                   else f"answer {status}, nothing written in 90 s")  # fmt: skip


def _data_read_by_the_control_loop(arena: Arena) -> Outcome:
    """A workload whose model factory and labeller read the service's store and alice's
    work folder wherever they can (in the check's sandbox they cannot, and behave), and
    raise what they read: the control loop would record it as the deployment's error event,
    which bob reads back. Held: the first version is trained (in bob's sandbox) and no event
    holds what they aimed at."""
    aims = [str(arena.data_dir / "service.db"), str(arena.victim_work / "secret.txt")]
    doc = workload(
        arena,
        model={"entry_point": "evil.models:make",
               "kwargs": {"classes": 2, "channels": 3, "peek_at": aims}},
        labeller={"kind": "entry-point", "entry_point": "evil.models:labeller",
                  "kwargs": {"peek_at": aims}},
    )  # fmt: skip
    spec = {"name": "bob-peek", "window_s": 5, "workload": doc}

    def leaks(text: str) -> bool:
        return "SQLite format 3" in text or arena.secret in text

    trained = False
    with arena.client() as client:
        answer = client.post("/v1/deployments", json=spec)
        status, leaked = answer.status_code, leaks(answer.text)
        deadline = time.monotonic() + 120
        while status < 400 and time.monotonic() < deadline and not (leaked or trained):
            leaked = leaks(client.get("/v1/deployments/bob-peek/events").text)
            trained = client.get("/v1/deployments/bob-peek").json().get("serving_version") == 1
            time.sleep(1.0)
        client.delete("/v1/deployments/bob-peek", params={"confirm": "bob-peek"})
    if leaked:
        return Outcome(True, f"the store or alice's secret in bob's {status} answer or events")
    return Outcome(False, "v1 trained, nothing read" if trained else f"answer {status}, "
                   "nothing read in 120 s")  # fmt: skip


def _cross_tenant_reads(arena: Arena) -> Outcome:
    job = arena.victim_job
    paths = [f"/v1/jobs/{job}", f"/v1/jobs/{job}/logs", f"/v1/jobs/{job}/result",
             f"/v1/jobs/{job}/metrics"]  # fmt: skip
    with arena.client() as client:
        answers = {p: client.get(p) for p in paths}
        halt = client.post(f"/v1/jobs/{job}/halt").status_code
    read = [p for p, r in answers.items() if r.status_code == 200 or arena.secret in r.text]
    return Outcome(bool(read) or halt < 400, f"read {read}, halt {halt}")


def _metrics_with_tenant_token(arena: Arena) -> Outcome:
    with arena.client() as client:
        status = client.get("/metrics").status_code
    return Outcome(status == 200, f"answer {status}")


def _dns_rebinding(arena: Arena) -> Outcome:
    with arena.client() as client:
        status = client.get("/v1/jobs", headers={"Host": "attacker.example:8750"}).status_code
    return Outcome(status == 200, f"answer {status}")


def _idempotency_key_of_another_tenant(arena: Arena) -> Outcome:
    """Alice submitted with a key; bob sends the same key and body: he gets a job of his
    own, never alice's."""
    body = {"name": "keyed", "kind": "command", "spec": {"argv": ["true"]}}
    headers = {"Idempotency-Key": "shared-key"}
    with arena.client(arena.victim_token) as alice, arena.client() as bob:
        theirs = alice.post("/v1/jobs", json=body, headers=headers).json()["id"]
        mine = bob.post("/v1/jobs", json=body, headers=headers).json().get("id")
    return Outcome(mine == theirs, f"bob got {'alice' if mine == theirs else 'his own'} job")


def _revoked_token(arena: Arena) -> Outcome:
    with arena.client() as client:
        minted = client.post("/v1/tokens", json={"label": "leaked"}).json()
        client.delete(f"/v1/tokens/{minted['id']}")
    with arena.client(minted["token"]) as stolen:
        status = stolen.get("/v1/jobs").status_code
    return Outcome(status == 200, f"a revoked token answered {status}")


def probe_attacks() -> list[ProbeAttack]:
    return [
        ProbeAttack("run a shell command as the model entry point at job submission",
                    "workload entry point", True, _check_writes_host),
        ProbeAttack("raise another tenant's secret from the model entry point",
                    "workload entry point", False, _check_leaks_secret),
        ProbeAttack("the store as the model file", "workload model file", False,
                    _model_file_is_the_store),
        ProbeAttack("another tenant's folder as the data", "folder paths", False,
                    _folder_of_another_tenant),
        ProbeAttack("CSV rows naming another tenant's files", "CSV paths", False,
                    _csv_rows_of_another_tenant),
        ProbeAttack("run a shell command at POST /v1/deployments", "workload entry point",
                    False, _deployment_check_writes_host),
        ProbeAttack("model and labeller run by the control loop", "labellers", False,
                    _code_in_the_control_loop),
        ProbeAttack("read the store and another tenant's files from the control loop",
                    "labellers", False, _data_read_by_the_control_loop),
        ProbeAttack("read or halt another tenant's job", "service ports", True,
                    _cross_tenant_reads),
        ProbeAttack("read every tenant's metrics", "service ports", True,
                    _metrics_with_tenant_token),
        ProbeAttack("DNS rebinding (a foreign Host)", "service ports", True, _dns_rebinding),
        ProbeAttack("reuse another tenant's Idempotency-Key", "service ports", True,
                    _idempotency_key_of_another_tenant),
        ProbeAttack("use a revoked token", "service ports", True, _revoked_token),
        *model_attacks(),
        *loop_attacks(),
    ]  # fmt: skip


def victim_manifest(arena: Arena) -> dict[str, Any]:
    """Alice's job: her secret in its work folder and its log, running until released."""
    script = ('echo "$SECRET" > secret.txt; echo "alice says $SECRET"; '
              "while [ ! -f release ]; do sleep 0.2; done")  # fmt: skip
    return {"name": "alice-holds", "kind": "command", "spec": {
        "argv": ["sh", "-c", script], "env": {"SECRET": arena.secret}}}  # fmt: skip


def summary_rows(results: list[tuple[str, str, Outcome, float]]) -> list[list[str]]:
    return [[name, entry, "BREACH" if o.breached else "held", o.evidence[:70], f"{s:.1f}"]
            for name, entry, o, s in results]  # fmt: skip


def as_json(results: list[tuple[str, str, Outcome, float]]) -> str:
    return json.dumps([{"attack": n, "entry": e, "breached": o.breached, "evidence": o.evidence}
                       for n, e, o, _ in results], indent=2)  # fmt: skip

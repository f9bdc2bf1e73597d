"""An attack of ``python -m deepedge.bench.isolation`` on the control loop's time: one tenant
must never stall another's windows.

Bob deploys a workload whose labeller sleeps (100 s, past its time bound) whenever a window
holds one of his crafted images; alice deploys the site's digits with 2 s windows. Both
deployments' windows then get sampled traffic, as the data plane would store it for their
cameras' requests (written to the site's sample store by the benchmark: this stage runs
without a data plane): bob's crafted images every window, alice's digits. The attack
breaches when alice's windows lose their period while bob's labeller sleeps:
``loop_period_err`` is ``|mean period - window_s| / window_s`` of alice's windows over the
measured span (target <= 0.10).
"""

from __future__ import annotations

import textwrap
import threading
import time
import uuid
from typing import Any

import numpy as np

from deepedge.bench.isolation_attacks import Arena, Outcome, ProbeAttack

ALICE_WINDOW_S = 2.0
MEASURE_S = 40.0  # alice's windows measured while bob's labeller sleeps
READY_S = 300.0  # both first versions trained
MARKER = 0.123  # bob's crafted pixel
SLEEPY = textwrap.dedent(
    f"""
    import time

    import numpy as np


    def labeller(sleep_s=100.0):
        def label(images):
            if np.any(np.abs(images[:, 0, 0, 0] - {MARKER}) < 1e-6):
                time.sleep(sleep_s)  # on bob's crafted images: past any time bound
            return np.zeros(len(images), dtype=np.int64)

        return label
    """
)
LAST_PERIOD_ERR: list[float] = []  # the measure of the newest run (the RESULT line reads it)


def furnish_loop(arena: Arena) -> None:
    path = arena.attacker_grant / "evil" / "sleepy.py"
    path.write_text(SLEEPY)
    path.chmod(0o644)


def _bob(arena: Arena) -> dict[str, Any]:
    return {
        "name": "bob-sleeps", "window_s": 2.0,
        "workload": {
            "name": "bobs-cams", "python_path": [str(arena.attacker_grant)],
            "model": {"entry_point": "evil.models:make", "kwargs": {"classes": 2, "channels": 3}},
            "input": {"size": [12, 12], "channels": 3},
            "data": {"kind": "folder", "root": str(arena.attacker_grant / "images")},
            "labeller": {"kind": "entry-point", "entry_point": "evil.sleepy:labeller"},
        },
    }  # fmt: skip


def _alice() -> dict[str, Any]:
    return {"name": "alice-cams", "window_s": ALICE_WINDOW_S, "labeller": "golden-model",
            "stream": {"window_size": 100, "onset_window": 1000}}  # fmt: skip


def _feed(arena: Arena, ids: dict[str, str], stop: threading.Event) -> None:
    """Each second: 5 of bob's crafted images and 20 of alice's digits, as samples of
    their serving versions' answers."""
    from deepedge.dataplane.routing import RouteKind
    from deepedge.dataplane.sample_store import Retention, Sample, SampleStore, sample_store_path

    store = SampleStore(sample_store_path(arena.data_dir))
    rng = np.random.default_rng(0)
    try:
        while not stop.is_set():
            now = time.time()
            crafted = rng.random((5, 3, 12, 12), dtype=np.float32)
            crafted[:, 0, 0, 0] = MARKER
            digits = rng.random((20, 1, 16, 16), dtype=np.float32)
            for name, images in (("bob-sleeps", crafted), ("alice-cams", digits)):
                samples = [Sample(uuid.uuid4().hex, now, 1, RouteKind.SERVING, 0, x)
                           for x in images]  # fmt: skip
                store.append(ids[name], samples, Retention(), now=now)
            stop.wait(1.0)
    finally:
        store.close()


def _loop_stall(arena: Arena) -> Outcome:
    LAST_PERIOD_ERR.clear()
    with arena.client() as bob, arena.client(arena.victim_token) as alice:
        made = {"bob-sleeps": bob.post("/v1/deployments", json=_bob(arena)),
                "alice-cams": alice.post("/v1/deployments", json=_alice())}  # fmt: skip
        ids = {
            n: str(r.json().get("id", "")) if r.status_code < 400 else "" for n, r in made.items()
        }
        try:
            deadline = time.monotonic() + READY_S
            clients = {"bob-sleeps": bob, "alice-cams": alice}
            while time.monotonic() < deadline and not all(
                clients[n].get(f"/v1/deployments/{n}").json().get("serving_version")
                for n in clients
            ):
                time.sleep(1.0)
            if not all(ids.values()):
                return Outcome(False, "a deployment was refused: nothing to measure")
            stop = threading.Event()
            feeder = threading.Thread(target=_feed, args=(arena, ids, stop), daemon=True)
            feeder.start()
            time.sleep(2 * ALICE_WINDOW_S + 5.0)  # bob's first crafted window is labelled
            started = time.time()
            time.sleep(MEASURE_S)
            stop.set()
            feeder.join(timeout=10)
            points = alice.get("/v1/deployments/alice-cams/windows?limit=200").json()["windows"]
            ats = sorted(w["at"] for w in points if w["at"] >= started)
            bob_error = [e["message"] for e in bob.get("/v1/deployments/bob-sleeps/events")
                         .json()["events"] if e["kind"] == "error"]  # fmt: skip
        finally:
            for name, client in (("bob-sleeps", bob), ("alice-cams", alice)):
                client.delete(f"/v1/deployments/{name}", params={"confirm": name})
    if len(ats) < 3:
        LAST_PERIOD_ERR.append(1.0)
        return Outcome(True, f"alice's windows stalled: {len(ats)} in {MEASURE_S:.0f} s")
    periods = np.diff(ats)
    error = abs(float(np.mean(periods)) - ALICE_WINDOW_S) / ALICE_WINDOW_S
    LAST_PERIOD_ERR.append(error)
    said = f"; bob's: {bob_error[-1][:60]}" if bob_error else ""
    return Outcome(error > 0.10, f"alice's period {np.mean(periods):.2f} s (max gap "
                   f"{periods.max():.2f} s), error {error:.3f}{said}")  # fmt: skip


def loop_attacks() -> list[ProbeAttack]:
    return [ProbeAttack("a labeller that sleeps on crafted images stalls another tenant's "
                        "windows", "control loop", False, _loop_stall)]  # fmt: skip

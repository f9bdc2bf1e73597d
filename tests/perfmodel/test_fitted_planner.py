"""The Deep-Edge planner runs end to end on learned models (through the Protocol only)."""

from __future__ import annotations

import pytest
from _learned_cases import MEM_TOTAL_MB, synthetic_dataset

from deepedge.perfmodel.fit_budget import QUICK_FIT
from deepedge.perfmodel.fitted_model import DeviceModels, load_performance_model
from deepedge.perfmodel.fitting import fit_all
from deepedge.planning.sharding.deep_edge import plan_shards
from deepedge.planning.sharding.spec import ClusterSpec


def _worker(wid: str, cpu: float, deadline_s: float) -> dict:
    return {
        "id": wid,
        "device": "raspberry-pi-4",
        "state": {"cpu_util": cpu, "gpu_util": None, "mem_util": 0.3},
        "mem_capacity_mb": 0.9 * MEM_TOTAL_MB,
        "min_batch": 4,
        "max_batch": 128,
        "background_apps": [{"name": f"sift-{wid}", "kind": "sift", "deadline_s": deadline_s}],
    }


@pytest.mark.slow
def test_plan_shards_on_learned_models(tmp_path):
    dataset = synthetic_dataset(seed=3)
    fitted = fit_all(dataset.frame, QUICK_FIT, seed=0)  # trials, not seconds: load-proof
    DeviceModels.build(fitted, dataset.provenance.model_dump(), QUICK_FIT, 0).save(tmp_path)
    model = load_performance_model(tmp_path)  # one profiled device stands in for the Pis

    cluster = ClusterSpec.model_validate(
        {
            "workers": [
                _worker("idle", 0.1, 1.0),
                _worker("busy", 0.8, 1.0),
                _worker("tight", 0.1, 0.01),  # no SIFT frame takes 10 ms: must be excluded
            ],
            "parameter_server": {
                "device": "raspberry-pi-4",
                "state": {"cpu_util": 0.1, "gpu_util": None, "mem_util": 0.3},
            },
            "dataset_size": 2000,
        }
    )
    plan = plan_shards(cluster, model)
    by_id = {w.id: w for w in plan.workers}
    assert plan.feasible
    assert not by_id["tight"].selected and by_id["tight"].exclusion is not None
    assert by_id["idle"].selected
    assert sum(w.shard for w in plan.workers) == cluster.dataset_size
    chosen = [w for w in plan.workers if w.selected]
    assert all(4 <= w.batch_size <= 128 for w in chosen)
    if by_id["busy"].selected:  # the loaded worker gets the smaller shard
        assert by_id["busy"].shard < by_id["idle"].shard

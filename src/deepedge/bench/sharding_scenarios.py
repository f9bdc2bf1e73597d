"""Random clusters for the sharding benchmark (Deep-Edge, Section V-C).

Every worker runs the SIFT task (one 640x320 frame every 200 ms, deadline 200 ms) plus a
random set of stress-ng-like stressors; a drawn state is kept only if it is *feasible*
before training starts (SIFT meets its deadline under the ground truth, and the minimum
batch fits in memory), as in the paper's experiments.

Initial state of a worker (utilisations as fractions)::

    base       = OS + SIFT: cpu 0.05 + SIFT's share of the cores, gpu 0.02, mem 0.25
    stressors  = each of {cpu, gpu, mem} present with probability ``p_stress``, with an
                 intensity drawn uniformly from its range below
    X_initial  = base + intensity * (1 - base)      per resource
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from deepedge.cluster.devices import AppKind, DeviceType
from deepedge.cluster.state import NodeState
from deepedge.perfmodel.catalog import APP_PROFILES, DEVICE_PROFILES, DeviceCatalog
from deepedge.planning.sharding.spec import (
    BackgroundApp,
    ClusterSpec,
    ParameterServerSpec,
    StateSpec,
    WorkerSpec,
)

SIFT_PERIOD_S = 0.2
CORES = {DeviceType.JETSON_TX2: 6, DeviceType.JETSON_NANO: 4, DeviceType.RASPBERRY_PI_4: 4}
MEM_CAPACITY_FRACTION = 0.88  # the operator keeps 12 % of physical memory free
PAPER_DATASET_SIZE = 3855  # Caltech-256 samples of the paper's model update
TESTBED = (
    DeviceType.JETSON_TX2,
    DeviceType.JETSON_NANO,
    DeviceType.JETSON_NANO,
    DeviceType.JETSON_NANO,
)


@dataclass(frozen=True, slots=True)
class StressRanges:
    """Uniform intensity ranges of the stressors and the chance that each one runs."""

    p_stress: float = 0.6
    cpu: tuple[float, float] = (0.1, 0.9)
    gpu: tuple[float, float] = (0.2, 0.98)
    mem: tuple[float, float] = (0.1, 0.6)


def _draw_state(rng: np.random.Generator, device: DeviceType, stress: StressRanges) -> StateSpec:
    sift_s = APP_PROFILES[AppKind.SIFT].base_s[device]
    base_cpu = 0.05 + sift_s / SIFT_PERIOD_S / CORES[device]
    base = {"cpu": base_cpu, "gpu": 0.02, "mem": 0.25}
    state = {}
    for resource, bounds in (("cpu", stress.cpu), ("gpu", stress.gpu), ("mem", stress.mem)):
        level = base[resource]
        if rng.random() < stress.p_stress:
            level += float(rng.uniform(*bounds)) * (1.0 - level)
        state[resource] = round(min(level, 1.0), 4)
    gpu = state["gpu"] if device.has_gpu else None
    return StateSpec(cpu_util=state["cpu"], gpu_util=gpu, mem_util=state["mem"])


def random_worker(
    rng: np.random.Generator,
    worker_id: str,
    device: DeviceType,
    truth: DeviceCatalog,
    stress: StressRanges,
) -> WorkerSpec:
    """A worker whose initial state is feasible under the ground truth ``truth``."""
    mem_capacity = round(MEM_CAPACITY_FRACTION * DEVICE_PROFILES[device].mem_total_mb)
    sift = BackgroundApp(name=f"sift-{worker_id}", kind=AppKind.SIFT, deadline_s=SIFT_PERIOD_S)
    while True:
        state = _draw_state(rng, device, stress)
        node = state.to_node_state()
        if truth.est_exec_time_s(device.value, AppKind.SIFT.value, node) > sift.deadline_s:
            continue
        if truth.max_batch_size(device.value, node, mem_capacity, 4, 64) == 0:
            continue
        return WorkerSpec(
            id=worker_id,
            device=device,
            state=state,
            mem_capacity_mb=mem_capacity,
            min_batch=4,
            max_batch=64,
            transfer_s_per_sample=0.002,
            init_s=25.0,
            background_apps=[sift],
        )


def random_cluster(
    rng: np.random.Generator,
    devices: tuple[DeviceType, ...] = TESTBED,
    dataset_size: int = PAPER_DATASET_SIZE,
    stress: StressRanges | None = None,
    truth: DeviceCatalog | None = None,
) -> ClusterSpec:
    """One random, initially feasible cluster with a Raspberry Pi 4 parameter server."""
    stress = stress or StressRanges()
    truth = truth or DeviceCatalog()
    counts: dict[DeviceType, int] = {}
    workers = []
    for device in devices:
        counts[device] = counts.get(device, 0) + 1
        short = device.value.split("-")[-1]
        workers.append(random_worker(rng, f"{short}-{counts[device]}", device, truth, stress))
    ps = NodeState(cpu_util=round(float(rng.uniform(0.05, 0.5)), 4), mem_util=0.3)
    return ClusterSpec(
        workers=workers,
        parameter_server=ParameterServerSpec(
            device=DeviceType.RASPBERRY_PI_4,
            state=StateSpec(cpu_util=ps.cpu_util, mem_util=ps.mem_util),
        ),
        dataset_size=dataset_size,
        num_epochs=1,
    )


def scaled_devices(n_workers: int) -> tuple[DeviceType, ...]:
    """The testbed's mix (1 TX2 : 3 Nano) repeated to ``n_workers`` workers."""
    return tuple(TESTBED[i % len(TESTBED)] for i in range(n_workers))


DEVICE_MIX = (DeviceType.JETSON_TX2, DeviceType.JETSON_NANO, DeviceType.RASPBERRY_PI_4)


def random_oracle_cluster(
    rng: np.random.Generator, max_workers: int = 6, truth: DeviceCatalog | None = None
) -> ClusterSpec:
    """A random small cluster for the exact oracle, unlike the testbed's experiments.

    1-``max_workers`` workers of any device class; states from the stressor model (not
    required to be feasible: a worker whose app misses its deadline at every batch is
    simply excluded); SIFT (deadline 200 ms) or a DNN inference app (deadline 60-400 ms),
    or none; batch bounds ``b_min`` in {1, 2, 4, 8}, ``b_max`` in {16, 32, 64}; 30 % of the
    workers memory-bound (room for only ``b_min`` to 24 samples), the others allowed 88 %
    of physical memory (the testbed's reserve) or all of it, where a large batch brings
    the node near swapping and the app's deadline then depends on the batch; ``|M|`` log-uniform on
    [4, 200] in 35 % of the clusters (shards of a few batches) and on [200, 20000]
    otherwise; initialisation 0-60 s, transfer 0-10 ms per sample, 1-5 epochs.
    """
    truth = truth or DeviceCatalog()
    stress = StressRanges()
    workers = []
    for k in range(int(rng.integers(1, max_workers + 1))):
        device = DEVICE_MIX[int(rng.integers(len(DEVICE_MIX)))]
        profile = DEVICE_PROFILES[device]
        state = _draw_state(rng, device, stress)
        min_batch = int(rng.choice([1, 2, 4, 8]))
        max_batch = int(rng.choice([16, 32, 64]))
        physical = profile.mem_total_mb
        if rng.random() < 0.3:  # memory-bound: room for b_min to 24 samples
            used_mb = state.mem_util * physical + profile.model_mem_mb
            room = float(rng.uniform(min_batch, 24)) * profile.sample_mem_mb
            capacity = min(physical, used_mb + room)
        else:  # the operator's 12 % reserve, or none (the node may then near swapping)
            capacity = physical * (MEM_CAPACITY_FRACTION if rng.random() < 0.5 else 1.0)
        capacity = round(capacity, 1)
        roll = rng.random()
        apps = []
        if roll < 0.6:
            apps.append(
                BackgroundApp(name=f"sift-{k}", kind=AppKind.SIFT, deadline_s=SIFT_PERIOD_S)
            )
        elif roll < 0.8:
            deadline = round(float(rng.uniform(0.06, 0.4)), 3)
            apps.append(
                BackgroundApp(name=f"dnn-{k}", kind=AppKind.DNN_INFERENCE, deadline_s=deadline)
            )
        workers.append(
            WorkerSpec(
                id=f"w{k}",
                device=device,
                state=state,
                mem_capacity_mb=capacity,
                min_batch=min_batch,
                max_batch=max_batch,
                transfer_s_per_sample=round(float(rng.uniform(0.0, 0.01)), 5),
                init_s=round(float(rng.uniform(0.0, 60.0)), 2),
                background_apps=apps,
            )
        )
    small = rng.random() < 0.35
    low, high = (4, 200) if small else (200, 20_000)
    size = round(math.exp(rng.uniform(math.log(low), math.log(high))))
    return ClusterSpec(
        workers=workers,
        parameter_server=ParameterServerSpec(
            device=DeviceType.RASPBERRY_PI_4,
            state=StateSpec(cpu_util=round(float(rng.uniform(0.05, 0.5)), 4), mem_util=0.3),
        ),
        dataset_size=size,
        num_epochs=int(rng.choice([1, 2, 3, 5])),
    )

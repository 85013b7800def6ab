"""System metrics: the client samples CPU and memory on its own at a low rate under `system/…`,
with the sample number as step, and leaves the run's own step numbering alone."""

from __future__ import annotations

import time

from shared.tracking.system import SystemSampler
from tests.shared.tracking.conftest import start_run


def test_a_busy_process_reads_as_busy_and_memory_is_reported():
    sampler = SystemSampler()
    wall, cpu = time.monotonic(), time.process_time()
    while time.process_time() - cpu < 0.3:
        sum(i * i for i in range(1000))
    got = sampler.sample()
    busy = 100 * (time.process_time() - cpu) / (time.monotonic() - wall)  # this process's share, however loaded
    assert abs(got["system/cpu_percent"] - busy) < 0.25 * busy
    time.sleep(0.3)
    assert sampler.sample()["system/cpu_percent"] < busy / 2  # asleep reads as idle
    assert 0.01 < got["system/process_memory_gib"] < 64
    assert 0 < got["system/memory_used_fraction"] < 1 and got["system/memory_used_gib"] > 0


def test_a_run_logs_system_samples_on_their_own_steps(tracker):
    run = start_run(tracker, system_metrics_s=0.15)
    for _ in range(3):
        run.log({"loss": 1.0})
    time.sleep(0.8)
    run.log({"loss": 0.5})
    delivery = run.finish()
    assert delivery.complete and run.points_logged == 4  # the samples are delivered, counted apart
    assert delivery.points_logged == 4 + run.system_points_logged and run.system_points_logged >= 12
    keys = {k["key"]: k for k in tracker.store.keys(run.id)["scalars"]}
    assert tracker.store.series(run.id, "loss")["steps"] == [0, 1, 2, 3]  # samples did not move the steps
    cpu = tracker.store.series(run.id, "system/cpu_percent")
    assert cpu["total"] >= 3 and cpu["steps"][:3] == [0, 1, 2]
    assert keys["system/process_memory_gib"]["last_value"] > 0.01


def test_system_metrics_can_be_turned_off(tracker):
    run = start_run(tracker, system_metrics_s=0)
    run.log({"loss": 1.0})
    time.sleep(0.3)
    assert run.finish().complete
    assert [k["key"] for k in tracker.store.keys(run.id)["scalars"]] == ["loss"]

"""The pipeline driver's torch threads: the node's Ray CPUs, unless the user chose a count."""

from __future__ import annotations

import json

import pytest
import torch

from cluster import driver_threads as dt

# what Ray puts in a job entrypoint's environment (seen in a `ray job submit` on Ray 2.60)
JOB_ENV = {"OMP_NUM_THREADS": "1", dt.JOB_CONFIG_ENV: json.dumps({"runtime_env": {"env_vars": {}}, "metadata": {}})}


def test_ray_s_own_setting_in_a_job_is_not_the_user_s():
    assert not dt.user_set_threads(JOB_ENV)
    assert not dt.user_set_threads({})
    assert dt.user_set_threads({"OMP_NUM_THREADS": "1"})  # a pipeline started by hand: the user's
    chosen = {**JOB_ENV, dt.JOB_CONFIG_ENV: json.dumps({"runtime_env": {"env_vars": {"OMP_NUM_THREADS": "1"}}})}
    assert dt.user_set_threads(chosen)  # set in the job's runtime_env
    assert dt.user_set_threads({**JOB_ENV, dt.JOB_CONFIG_ENV: "not json"})  # unreadable: left alone


@pytest.fixture
def threads():
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def test_a_job_driver_gets_the_node_s_ray_cpus(ray_local, monkeypatch, threads):
    assert dt.node_cpus(ray_local) == 2  # the session's local Ray: num_cpus=2
    for key, value in JOB_ENV.items():
        monkeypatch.setenv(key, value)
    torch.set_num_threads(1)  # as the entrypoint starts
    assert dt.use_node_cpus(ray_local) == 2 and torch.get_num_threads() == 2
    assert dt.use_node_cpus(ray_local) is None  # already there: nothing to change


def test_a_count_the_user_chose_is_kept(ray_local, monkeypatch, threads):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv(dt.JOB_CONFIG_ENV, json.dumps({"runtime_env": {"env_vars": {"OMP_NUM_THREADS": "1"}}}))
    torch.set_num_threads(1)
    assert dt.use_node_cpus(ray_local) is None and torch.get_num_threads() == 1


def test_a_node_ray_gives_no_cpus_uses_the_container_s_limit(tmp_path, monkeypatch):
    cores = len(__import__("os").sched_getaffinity(0))
    cpu_max = tmp_path / "cpu.max"
    cpu_max.write_text("max 100000\n")
    assert dt.container_cpus(cpu_max) == cores
    cpu_max.write_text("150000 100000\n")  # 1.5 CPUs
    assert dt.container_cpus(cpu_max) == 1
    assert dt.container_cpus(tmp_path / "absent") == cores
    monkeypatch.setattr(dt, "node_cpus", lambda ray: 0)  # the cluster specs' head: CPU 0
    monkeypatch.setattr(dt, "container_cpus", lambda: 3)
    assert dt.driver_cpus(None) == 3

"""The cluster specs (cluster/ray-cluster.yaml, cluster/kuberay-rayjob.yaml) are valid and agree.

The launcher config is checked with Ray's own schema and defaults (the same `prepare_config` +
`validate_config` that `ray up` runs); the RayJob is checked against the fields of KubeRay's
ray.io/v1 RayJob CRD that matter here, and both against docker/ and pyproject.toml: one image,
built from docker/Dockerfile.gpu and tagged with the project version, on every node.
"""

from __future__ import annotations

import copy
import re
import tomllib
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
LAUNCHER = ROOT / "cluster" / "ray-cluster.yaml"
RAYJOB = ROOT / "cluster" / "kuberay-rayjob.yaml"
ENTRYPOINT_MODULE = "cluster.pipeline"


def _expected_image() -> str:
    """moelab/moelab-<flavour>:<project version>, the flavour being docker/Dockerfile.<flavour>."""
    assert (ROOT / "docker" / "Dockerfile.gpu").is_file()
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    return f"moelab/moelab-gpu:{version}"


def _dockerfile_workdir() -> str:
    match = re.search(r"^WORKDIR\s+(\S+)", (ROOT / "docker" / "Dockerfile.gpu").read_text(), flags=re.M)
    assert match, "docker/Dockerfile.gpu has no WORKDIR"
    return match.group(1)


@pytest.fixture(scope="module")
def launcher() -> dict:
    return yaml.safe_load(LAUNCHER.read_text())


@pytest.fixture(scope="module")
def rayjob() -> dict:
    return yaml.safe_load(RAYJOB.read_text())


def test_launcher_config_passes_rays_own_validation(launcher):
    from ray.autoscaler._private.util import prepare_config, validate_config

    validate_config(prepare_config(copy.deepcopy(launcher)))


def test_launcher_has_a_cpu_group_and_two_gpu_groups_with_distinct_accelerators(launcher):
    types = launcher["available_node_types"]
    head = types[launcher["head_node_type"]]
    assert head["resources"].get("CPU") == 0 and not head["resources"].get("GPU")
    workers = {name: t for name, t in types.items() if name != launcher["head_node_type"]}
    cpu_groups = [t for t in workers.values() if t["resources"].get("CPU", 0) > 0 and not t["resources"].get("GPU")]
    gpu_groups = [t for t in workers.values() if t["resources"].get("GPU", 0) > 0]
    assert len(cpu_groups) >= 1 and len(gpu_groups) >= 2
    accelerators = [{k for k in t["resources"] if k.startswith("accelerator_type:")} for t in gpu_groups]
    assert all(len(a) == 1 for a in accelerators) and len(set().union(*accelerators)) == len(gpu_groups)
    assert launcher["max_workers"] >= sum(t["max_workers"] for t in workers.values())
    for t in workers.values():
        assert 0 <= t["min_workers"] <= t["max_workers"]


def test_launcher_runs_the_gpu_image_from_docker_everywhere(launcher):
    docker = launcher["docker"]
    assert docker["image"] == _expected_image()
    assert "head_image" not in docker and "worker_image" not in docker
    assert all("docker" not in t for t in launcher["available_node_types"].values())


def test_launcher_workers_join_the_head_port(launcher):
    port = re.search(r"--port=(\d+)", " ".join(launcher["head_start_ray_commands"])).group(1)
    assert any(f"--address=$RAY_HEAD_IP:{port}" in c for c in launcher["worker_start_ray_commands"])
    assert any("--autoscaling-config=~/ray_bootstrap_config.yaml" in c for c in launcher["head_start_ray_commands"])


def test_rayjob_submits_the_pipeline_module_on_a_committed_config(rayjob):
    from shared.config import load_config

    assert rayjob["apiVersion"] == "ray.io/v1" and rayjob["kind"] == "RayJob"
    spec = rayjob["spec"]
    assert spec["submissionMode"] in {"K8sJobMode", "HTTPMode"}
    argv = spec["entrypoint"].split()
    assert argv[:3] == ["python", "-m", ENTRYPOINT_MODULE]
    load_config(ROOT / argv[3])  # the config it runs exists and validates
    runtime_env = yaml.safe_load(spec["runtimeEnvYAML"])
    assert runtime_env["working_dir"] == _dockerfile_workdir()
    assert spec["shutdownAfterJobFinishes"] is True and spec["ttlSecondsAfterFinished"] > 0


def test_rayjob_cluster_matches_the_installed_ray_and_the_docker_image(rayjob):
    import ray

    cluster = rayjob["spec"]["rayClusterSpec"]
    assert cluster["rayVersion"] == ray.__version__
    head = cluster["headGroupSpec"]
    assert head["rayStartParams"]["num-cpus"] == "0"
    pods = [head["template"]["spec"]] + [g["template"]["spec"] for g in cluster["workerGroupSpecs"]]
    for pod in pods:
        for container in pod["containers"]:
            assert container["image"] == _expected_image()
            assert container["workingDir"] == _dockerfile_workdir()
            assert container["resources"]["requests"] == container["resources"]["limits"]
    ports = {p["name"]: p["containerPort"] for p in head["template"]["spec"]["containers"][0]["ports"]}
    assert ports == {"gcs-server": 6379, "dashboard": 8265, "client": 10001}


def test_rayjob_groups_mirror_the_launcher_groups(rayjob, launcher):
    groups = rayjob["spec"]["rayClusterSpec"]["workerGroupSpecs"]
    names = [g["groupName"] for g in groups]
    assert len(names) == len(set(names)) == 3
    gpu_accels = set()
    for g in groups:
        assert {"groupName", "minReplicas", "maxReplicas", "replicas", "rayStartParams", "template"} <= set(g)
        assert 0 <= g["minReplicas"] <= g["replicas"] <= g["maxReplicas"]
        limits = g["template"]["spec"]["containers"][0]["resources"]["limits"]
        if "nvidia.com/gpu" in limits:
            custom = yaml.safe_load(yaml.safe_load(g["rayStartParams"]["resources"]))
            gpu_accels |= set(custom)
    launcher_accels = {k for t in launcher["available_node_types"].values() for k in t["resources"]
                       if k.startswith("accelerator_type:")}
    assert gpu_accels == launcher_accels
    assert rayjob["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0][
        "resources"]["limits"].get("nvidia.com/gpu") is None


def test_the_entrypoint_module_the_specs_submit_exists():
    import importlib.util

    assert importlib.util.find_spec(ENTRYPOINT_MODULE) is not None


def _submitted_config(rayjob):
    from shared.config import load_config

    path = rayjob["spec"]["entrypoint"].split()[3]
    assert Path(path).name.startswith("cluster-"), f"the specs submit {path}, not a GPU cluster recipe"
    return load_config(ROOT / path)


def _launcher_gpu_groups(launcher) -> set[tuple[str, int, int]]:
    out = set()
    for t in launcher["available_node_types"].values():
        if t["resources"].get("GPU"):
            accel = next(k.split(":", 1)[1] for k in t["resources"] if k.startswith("accelerator_type:"))
            out.add((accel, int(t["resources"]["GPU"]), int(t["max_workers"])))
    return out


def _rayjob_gpu_groups(rayjob) -> set[tuple[str, int, int]]:
    out = set()
    for g in rayjob["spec"]["rayClusterSpec"]["workerGroupSpecs"]:
        limits = g["template"]["spec"]["containers"][0]["resources"]["limits"]
        if "nvidia.com/gpu" in limits:
            accel = next(iter(yaml.safe_load(yaml.safe_load(g["rayStartParams"]["resources"]))))
            out.add((accel.split(":", 1)[1], int(limits["nvidia.com/gpu"]), int(g["maxReplicas"])))
    return out


def test_both_specs_submit_the_same_gpu_recipe_and_it_declares_their_gpu_groups(launcher, rayjob):
    cfg = _submitted_config(rayjob)
    submit = " ".join(line for line in LAUNCHER.read_text().splitlines() if "ray job submit" in line)
    assert rayjob["spec"]["entrypoint"].split()[3] in submit
    declared = {(g.accelerator_type, g.gpus_per_node, g.max_nodes) for g in cfg.cluster.gpu_nodes}
    assert declared == _launcher_gpu_groups(launcher) == _rayjob_gpu_groups(rayjob)
    assert cfg.train.device == "cuda" and cfg.cluster.train_gpus_per_worker == 1


def test_every_gpu_request_of_the_submitted_recipe_fits_a_group_with_its_cpus(launcher, rayjob):
    from shared.placement import GpuNode, check_gpu_request, config_gpu_requests

    cfg = _submitted_config(rayjob)
    nodes = [GpuNode(a, g, n) for a, g, n in _launcher_gpu_groups(launcher)]
    requests = config_gpu_requests(cfg)
    assert {r.what.split(" ")[0] for r in requests} == {"scorer.oracle.vllm", "scorer.scoring", "train"}
    for request in requests:
        assert request.accelerator_type is not None, f"{request.what} does not pick a group"
        check_gpu_request(request, nodes)
    cpus = {next(k.split(":", 1)[1] for k in t["resources"] if k.startswith("accelerator_type:")): t["resources"]["CPU"]
            for t in launcher["available_node_types"].values() if t["resources"].get("GPU")}
    pods = {g["groupName"]: g["template"]["spec"]["containers"][0]["resources"]["limits"]
            for g in rayjob["spec"]["rayClusterSpec"]["workerGroupSpecs"]}
    train_node = cpus[cfg.cluster.train_accelerator_type]
    per_node = min(cfg.train.workers, 8)
    assert cfg.cluster.train_cpus_per_worker * per_node <= min(train_node, float(pods["gpu-train"]["cpu"]))
    assert cfg.scorer.scoring.actor_cpus <= min(cpus[cfg.scorer.scoring.actor_accelerator_type],
                                                float(pods["gpu-score"]["cpu"]))


def test_a_request_the_groups_cannot_hold_fails_config_check(rayjob):
    from shared.config import ConfigError, load_config

    path = ROOT / rayjob["spec"]["entrypoint"].split()[3]
    with pytest.raises(ConfigError, match=r"scorer.oracle.vllm: 8 × 8 L40S GPU\(s\).*at most 1 GPU"):
        load_config(path, ["scorer.oracle.vllm.tensor_parallel_size=8", "scorer.oracle.vllm.accelerator_type=L40S"])

"""A real 2-node Ray cluster on one machine, for stages that must survive losing a node.

Why not `ray_local` (tests/conftest.py): one in-process Ray cannot lose a node. Here a head and a
second node are two `ray start --block` process trees, each with its own temp dir and ports (so
they neither clash with each other nor with any other Ray on the machine), and the second node
advertises the custom resource `node2` so a test can pin work to it. Drivers run in subprocesses
(`ray.init(address=...)`): the pytest process may already hold `ray_local`, and a process can
hold one Ray connection only.

Ray 2.60 enables token authentication for a head when a token file exists; the fixture gives
its cluster a token of its own (RAY_AUTH_MODE=token, RAY_AUTH_TOKEN_PATH) and `env` carries it
to drivers. `ray_two_nodes_gpu` is the same with a second node that declares a GPU.

Teardown never uses `ray stop` (it would stop every Ray on the machine): it ends exactly the
process groups this fixture started, then any leftover process whose command line names one of
its temp dirs.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from shared.net import free_ports

RAY = str(Path(sys.executable).with_name("ray"))
# Fast node-failure detection in the head's GCS: a dead node is declared after ~3 s, not ~30 s.
HEALTH_ENV = {
    "RAY_health_check_initial_delay_ms": "1000",
    "RAY_health_check_period_ms": "500",
    "RAY_health_check_timeout_ms": "500",
    "RAY_health_check_failure_threshold": "4",
    "RAY_USAGE_STATS_ENABLED": "0",
}




def _processes_under(temp_dir: str) -> list[int]:
    """PIDs whose command line mentions `temp_dir` (raylet, GCS, agents, workers of that node)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if temp_dir in cmdline:
            pids.append(int(entry.name))
    return pids


@dataclass
class RayNode:
    """One `ray start --block` process tree we own."""

    name: str
    temp_dir: str
    proc: subprocess.Popen
    log: Path

    def kill(self, sig: int = signal.SIGKILL, wait_s: float = 10.0) -> None:
        """Kill the node's process group and any of its processes that left the group."""
        try:
            os.killpg(self.proc.pid, sig)
        except ProcessLookupError:
            pass
        for pid in _processes_under(self.temp_dir):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        try:
            self.proc.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            pass


@dataclass
class TwoNodeCluster:
    """Address of the head, the two nodes, and a helper to run a driver script against it."""

    address: str
    head: RayNode
    node2: RayNode
    env: dict = field(default_factory=dict)

    def node_ids(self, timeout: float = 60.0) -> dict[str, str]:
        """{'head': node_id, 'node2': node_id} of the alive nodes (node2 is the one with `node2`)."""
        code = (
            f"import json, ray; ray.init(address={self.address!r}, logging_level='ERROR', log_to_driver=False); "
            "print(json.dumps([[n['NodeID'], n['Alive'], n['Resources']] for n in ray.nodes()]))"
        )
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout,
                             env=self.env, check=True).stdout
        nodes = json.loads(out.strip().splitlines()[-1])
        return {("node2" if "node2" in res else "head"): nid for nid, alive, res in nodes if alive}


def _start_node(name: str, args: list[str], env: dict) -> RayNode:
    temp_dir = tempfile.mkdtemp(prefix=f"rt{name}-")  # short: Ray's socket paths must fit 107 chars
    log = Path(temp_dir) / "ray-start.log"
    fh = open(log, "wb")  # noqa: SIM115 - closed by the child's exit; we only read the file
    proc = subprocess.Popen([RAY, "start", "--block", "--temp-dir", temp_dir, "--disable-usage-stats", *args],
                            stdout=fh, stderr=subprocess.STDOUT, env={**env, "PYTHONUNBUFFERED": "1"},
                            start_new_session=True)
    return RayNode(name, temp_dir, proc, log)


def _wait_for_nodes(cluster: TwoNodeCluster, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        for node in (cluster.head, cluster.node2):
            if node.proc.poll() is not None:
                raise RuntimeError(f"`ray start` of {node.name} exited:\n{node.log.read_text(errors='replace')[-3000:]}")
        try:
            if set(cluster.node_ids(timeout=30)) == {"head", "node2"}:
                return
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
            last = getattr(exc, "stderr", "") or str(exc)
        time.sleep(1)
    raise RuntimeError(f"2-node Ray cluster did not come up in {timeout:.0f} s: {last[-2000:]}")


# Start failures that say nothing about the code under test: a port chosen free was bound by someone
# else first, or a loaded 2-core machine kept a raylet from registering within Ray's own 30 s.
RAY_STARTED = "Ray runtime started."  # what `ray start` prints once its node is registered
TRANSIENT_START_FAILURES = ("Address already in use", "timed out during startup")


def _two_nodes(node2_cpus: int = 1, node2_args: tuple[str, ...] = (), node2_resources: dict | None = None):
    """A head (2 CPUs) and a second node (`node2_cpus`, resource `node2` plus `node2_resources`, any
    extra `ray start` args such as `--num-gpus 1`), joined at 127.0.0.1; stopped after.

    The ports are free when chosen but not reserved, so another process (often one of Ray's own
    workers elsewhere on the machine) can bind one before the node does; and on a loaded machine a
    raylet can miss Ray's 30 s registration deadline. A start that fails either way is retried from
    scratch on fresh ports, up to three times; any other failure is raised at once."""
    # Ray 2.60 turns token auth on for `ray start --head` when ~/.ray/auth_token exists; every node
    # and driver of this cluster shares its own token instead, whatever that file holds.
    token_dir = tempfile.mkdtemp(prefix="rtauth-")
    token_path = Path(token_dir) / "auth_token"
    token_path.write_text(secrets.token_hex(32))
    env = {**os.environ, **HEALTH_ENV, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token_path)}
    nodes: list[RayNode] = []
    try:
        for attempt in range(3):
            try:
                cluster = _start_two_nodes(env, nodes, node2_cpus, node2_args, node2_resources)
                break
            except RuntimeError as exc:
                _stop(nodes)
                if not any(reason in str(exc) for reason in TRANSIENT_START_FAILURES) or attempt == 2:
                    raise
        yield cluster
    finally:
        _stop(nodes)
        shutil.rmtree(token_dir, ignore_errors=True)


def _stop(nodes: list[RayNode]) -> None:
    for node in reversed(nodes):
        node.kill(signal.SIGTERM, wait_s=3.0)
        node.kill(signal.SIGKILL)
        shutil.rmtree(node.temp_dir, ignore_errors=True)
    nodes.clear()


def _start_two_nodes(env: dict, nodes: list[RayNode], node2_cpus: int, node2_args: tuple[str, ...],
                     node2_resources: dict | None) -> TwoNodeCluster:
    """Start both nodes on fresh ports (appended to `nodes` as they start) and wait until both are up."""
    gcs, client, agent1, agent2, mgr1, mgr2, obj1, obj2 = free_ports(8)
    # The head has 2 CPUs so Ray Data's 1-CPU file-listing and read tasks still find a CPU while
    # actors (half a CPU each, spread over the nodes) hold part of both nodes.
    common = ["--object-store-memory", str(100 * 1024 * 1024), "--include-log-monitor", "false"]
    head = _start_node("head", ["--head", "--node-ip-address", "127.0.0.1", "--port", str(gcs),
                                "--ray-client-server-port", str(client), "--include-dashboard", "false",
                                "--dashboard-agent-listen-port", str(agent1), "--node-manager-port", str(mgr1),
                                "--object-manager-port", str(obj1), "--num-cpus", "2", *common], env)
    nodes.append(head)
    # The second node joins once the head has finished starting (its raylet registered), so the two
    # raylets do not compete for a 2-core machine's GCS at the same moment.
    deadline = time.monotonic() + 90
    while RAY_STARTED not in head.log.read_text(errors="replace"):
        if head.proc.poll() is not None:
            raise RuntimeError(f"head `ray start` exited:\n{head.log.read_text(errors='replace')[-3000:]}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"head `ray start` timed out during startup:\n"
                               f"{head.log.read_text(errors='replace')[-3000:]}")
        time.sleep(0.5)
    resources = {"node2": 1, **(node2_resources or {})}
    node2 = _start_node("node2", ["--address", f"127.0.0.1:{gcs}", "--node-ip-address", "127.0.0.1",
                                  "--resources", json.dumps(resources), "--dashboard-agent-listen-port",
                                  str(agent2), "--node-manager-port", str(mgr2), "--object-manager-port",
                                  str(obj2), "--num-cpus", str(node2_cpus), *node2_args, *common], env)
    nodes.append(node2)
    cluster = TwoNodeCluster(f"127.0.0.1:{gcs}", head, node2, env)
    _wait_for_nodes(cluster, timeout=90)
    return cluster


@pytest.fixture
def ray_two_nodes():
    """A head (2 CPUs) and a second node (1 CPU, resource `node2`)."""
    yield from _two_nodes()


GPU_NODE_ACCELERATOR = "H100"


@pytest.fixture
def ray_two_nodes_gpu():
    """A CPU-only head (2 CPUs) and a GPU node: node2 declares one GPU (`--num-gpus 1`, Ray accepts it
    on a CPU machine) of accelerator type H100, with 2 CPUs, as a cluster's training/scoring node."""
    yield from _two_nodes(2, ("--num-gpus", "1"), {f"accelerator_type:{GPU_NODE_ACCELERATOR}": 1})

"""Test rails shared by the whole suite: markers, GPU skipping and one local Ray per session."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")


def _cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def pytest_collection_modifyitems(config, items):
    """`gpu` tests skip cleanly (with the reason) on machines without CUDA."""
    if any("gpu" in item.keywords for item in items) and not _cuda_available():
        skip = pytest.mark.skip(reason="needs a CUDA GPU (torch.cuda.is_available() is False)")
        for item in items:
            if "gpu" in item.keywords:
                item.add_marker(skip)


@pytest.fixture(scope="session")
def ray_local():
    """One local Ray (num_cpus=2) for every test that needs Ray; shut down at the end of the session.

    Tests that need Ray take this fixture instead of calling ray.init themselves, so the suite
    pays Ray's start-up (~8 s) once.
    """
    import ray

    if not ray.is_initialized():
        # address="local": always a fresh cluster, never one a `moelab demo` left running
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield ray
    ray.shutdown()

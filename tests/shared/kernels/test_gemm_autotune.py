"""The CPU GEMM autotune: one measurement per machine and shape class, cached, never slower than MKL."""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F

from shared.kernels import cpu_gemm, gemm_autotune
from shared.kernels.gemm_autotune import ShapeClass, cache_path, machine_key, verify_choices

needs_onednn = pytest.mark.skipif(not cpu_gemm.onednn_available(), reason="this torch build has no oneDNN matmul")

# The GEMM classes of the benchmark models: a linear's forward, input and weight gradient over 2,048
# rows (d 256 → 128, → 384) and a routed expert's (512 rows, d 512, width 128) with varying rows.
MODEL_GEMMS = (
    (2048, 256, 128, "rr", ""), (2048, 128, 256, "rc", ""), (128, 2048, 256, "cc", ""),
    (2048, 256, 384, "rr", ""), (384, 2048, 256, "cc", ""),
    (512, 512, 128, "rr", "m"), (512, 128, 512, "rc", "m"), (512, 512, 128, "cc", "k"),
)


@pytest.fixture(autouse=True)
def tuner(tmp_path, monkeypatch):
    monkeypatch.setenv("MOELAB_HOME", str(tmp_path))
    for var in gemm_autotune.ISA_ENV_VARS:
        monkeypatch.delenv(var, raising=False)
    gemm_autotune.TUNER.reset()
    yield gemm_autotune.TUNER
    gemm_autotune.TUNER.reset()


def _fake_times(monkeypatch, *rounds: dict[str, float], busy: bool = False) -> list[int]:
    """Make `time_gemms` return the given per-library times, one dict per call (and the machine
    look quiet, or busy); returns the call log."""
    calls: list[int] = []
    monkeypatch.setattr(gemm_autotune, "machine_is_busy", lambda: busy)

    def fake(gemms, a, b, vary="", rounds_=None, **_):
        calls.append(1)
        return rounds[min(len(calls), len(rounds)) - 1]

    monkeypatch.setattr(gemm_autotune, "time_gemms", fake)
    return calls


def test_machine_key_covers_cpu_model_flags_isa_caps_and_torch(monkeypatch):
    base = machine_key()
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    capped = machine_key()
    monkeypatch.setenv("MKL_ENABLE_INSTRUCTIONS", "AVX2")
    both = machine_key()
    assert len({base, capped, both}) == 3
    assert gemm_autotune.machine_fingerprint()["env"] == {"ONEDNN_MAX_CPU_ISA": "AVX2", "MKL_ENABLE_INSTRUCTIONS": "AVX2"}
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA")
    monkeypatch.delenv("MKL_ENABLE_INSTRUCTIONS")
    assert machine_key() == base
    monkeypatch.setattr(gemm_autotune, "_cpuinfo", lambda: ("AMD EPYC 9B45", ("avx2", "fma")))
    assert machine_key() != base
    assert gemm_autotune.machine_fingerprint()["isa_flags"] == ["avx2", "fma"]


def test_shape_class_rounds_sizes_up_to_powers_of_two_and_keeps_layout_threads_and_variation():
    cls = ShapeClass.of(300, 512, 129, "cr", "m", threads=2)
    assert (cls.m, cls.k, cls.n, cls.layout, cls.threads, cls.vary) == (512, 512, 256, "cr", 2, "m")
    assert cls.label == "m512.k512.n256.cr.t2.vary-m"
    assert ShapeClass.of(257, 512, 256, "cr", "m", threads=2) == cls
    assert ShapeClass.of(300, 512, 129, "cr", "", threads=2) != cls
    assert ShapeClass.of(300, 512, 129, "cr", "m", threads=1) != cls


def test_varying_classes_time_onednn_on_a_new_shape_every_call():
    a, b = torch.randn(512, 64), torch.randn(32, 64)
    rows = [x.shape[0] for x, _ in gemm_autotune._variants(a, b, "m", 20, 1)]
    assert len(set(rows)) == 20 and all(256 <= r < 512 for r in rows)
    ks = [(x.shape[1], y.shape[1]) for x, y in gemm_autotune._variants(a.t().contiguous().t(), b, "k", 5, 1)]
    assert len(set(ks)) == 5 and all(p == q for p, q in ks)
    assert all(x is a for x, _ in gemm_autotune._variants(a, b, "", 3, 1))


@needs_onednn
def test_first_use_measures_once_and_the_cache_serves_the_next_process(tuner, monkeypatch):
    monkeypatch.setattr(gemm_autotune, "machine_is_busy", lambda: False)  # else the entry is provisional
    a, b = torch.randn(1024, 512), torch.randn(256, 512)
    cpu_gemm.mm_nt(a, b)
    cpu_gemm.mm_nt(a[:1000], b)  # same class (rows rounded up to 1024)
    assert tuner.measured == 1
    data = json.loads(cache_path().read_text())
    section = data["machines"][machine_key()]
    assert section["fingerprint"]["cpu"] == gemm_autotune.machine_fingerprint()["cpu"]
    (entry,) = section["classes"].values()
    assert entry["library"] in ("mkl", "onednn") and entry["mkl_us"] > 0 and entry["onednn_us"] > 0
    assert (entry["m"], entry["k"], entry["n"]) == (1024, 512, 256)
    tuner.reset()  # as a new process would start
    cpu_gemm.mm_nt(a, b)
    assert tuner.measured == 0 and tuner.choices() == {ShapeClass.of(1024, 512, 256, "rr"): entry["library"]}


@needs_onednn
def test_an_isa_capped_run_keeps_its_own_choices(tuner, monkeypatch):
    tuner.library(1024, 512, 256, "rr")
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")  # as set before a new process starts
    tuner.reset()
    tuner.library(1024, 512, 256, "rr")
    assert tuner.measured == 1  # not served by the uncapped run's choice
    assert len(json.loads(cache_path().read_text())["machines"]) == 2


@needs_onednn
def test_onednn_is_chosen_only_when_clearly_faster_twice(tuner, monkeypatch):
    near = {"mkl": 1.0, "onednn": 0.93}
    clear = {"mkl": 1.0, "onednn": 0.8}
    calls = _fake_times(monkeypatch, near)
    assert tuner.library(4096, 512, 512, "rr") == "mkl" and len(calls) == 1  # within the margin: no second look
    calls = _fake_times(monkeypatch, clear, clear)
    assert tuner.library(4096, 512, 512, "rc") == "onednn" and len(calls) == 2
    _fake_times(monkeypatch, clear, {"mkl": 1.0, "onednn": 0.99})  # not confirmed: a slow spell during MKL's rounds
    assert tuner.library(4096, 512, 512, "cc") == "mkl"
    entry = json.loads(cache_path().read_text())["machines"][machine_key()]["classes"]["m4096.k512.n512.cc.t" +
                                                                                     str(torch.get_num_threads())]
    assert entry["onednn_us"] == pytest.approx(0.99e6)  # the confirming measurement is the one recorded


@needs_onednn
def test_a_busy_machine_gets_mkl_and_a_provisional_entry_measured_again_next_process(tuner, monkeypatch):
    _fake_times(monkeypatch, {"mkl": 1.0, "onednn": 0.5}, busy=True)
    assert tuner.library(4096, 512, 512, "rr") == "mkl"
    (entry,) = json.loads(cache_path().read_text())["machines"][machine_key()]["classes"].values()
    assert entry["provisional"] and entry["onednn_us"] == pytest.approx(0.5e6)
    tuner.reset()
    _fake_times(monkeypatch, {"mkl": 1.0, "onednn": 0.5})  # quiet now
    assert tuner.library(4096, 512, 512, "rr") == "onednn" and tuner.measured == 1
    (entry,) = json.loads(cache_path().read_text())["machines"][machine_key()]["classes"].values()
    assert not entry["provisional"]


def test_busy_means_more_runnable_work_than_cores(monkeypatch):
    cores = len(__import__("os").sched_getaffinity(0))
    monkeypatch.setattr(gemm_autotune.os, "getloadavg", lambda: (cores + 1.5, 0.0, 0.0))
    assert gemm_autotune.machine_is_busy()
    monkeypatch.setattr(gemm_autotune.os, "getloadavg", lambda: (cores + 0.5, 0.0, 0.0))
    assert not gemm_autotune.machine_is_busy()


def test_an_unreadable_cache_is_reported_and_rewritten(tuner):
    cache_path().parent.mkdir(parents=True, exist_ok=True)
    cache_path().write_text("{not json")
    with pytest.warns(UserWarning, match="ignoring the CPU autotune cache"):
        assert tuner.choices() == {}
    if cpu_gemm.onednn_available():
        tuner.library(1024, 512, 256, "rr")
        assert json.loads(cache_path().read_text())["version"] == gemm_autotune.CACHE_VERSION


def test_clear_forgets_this_machines_choices_only(tuner, monkeypatch):
    _fake_times(monkeypatch, {"mkl": 1.0, "onednn": 2.0})
    if not cpu_gemm.onednn_available():
        pytest.skip("needs oneDNN to tune")
    tuner.library(4096, 512, 512, "rr")
    data = json.loads(cache_path().read_text())
    data["machines"]["another-machine"] = {"fingerprint": {}, "classes": {}}
    cache_path().write_text(json.dumps(data))
    tuner.clear()
    assert tuner.choices() == {}
    assert list(json.loads(cache_path().read_text())["machines"]) == ["another-machine"]


def _tune_model_gemms(tuner) -> None:
    for m, k, n, layout, vary in MODEL_GEMMS:
        tuner.library(m, k, n, layout, vary)


@pytest.fixture
def pinned_threads(request):
    """`threads` torch threads, set explicitly (which also turns MKL's dynamic thread count off, as
    the benchmarks do: under load it made MKL's own timings erratic); restored afterwards."""
    before = torch.get_num_threads()
    torch.set_num_threads(request.param or before)
    yield
    torch.set_num_threads(before)


@needs_onednn
@pytest.mark.parametrize("pinned_threads", [1, 0], ids=["1-thread", "default-threads"], indirect=True)
def test_autotuned_choice_is_never_slower_than_plain_torch_by_more_than_5_percent(tuner, pinned_threads):
    """On every class it measured, the dispatch as the model runs it (lookup + chosen library) is
    within 5% of torch's `mm`; `verify_choices` re-times a class that misses before failing it."""
    _tune_model_gemms(tuner)
    rows = verify_choices(tuner)
    assert len(rows) == len(MODEL_GEMMS)
    slow = [r for r in rows if r["ratio"] < 0.95]
    assert not slow, f"autotuned GEMMs slower than torch.mm: {slow}"


@needs_onednn
@pytest.mark.parametrize("pinned_threads", [1, 0], ids=["1-thread", "default-threads"], indirect=True)
def test_linear_with_autotuned_gemms_is_not_slower_than_f_linear(pinned_threads):
    """A whole linear (forward + both gradients) at a model shape, against `F.linear`."""
    x = torch.randn(2048, 256, requires_grad=True)
    w = torch.randn(384, 256, requires_grad=True)
    dy = torch.randn(2048, 384)

    def ours():
        with torch.enable_grad():  # `time_gemms` times under no_grad
            torch.autograd.grad(cpu_gemm.linear(x, w), (x, w), dy)

    def plain():
        with torch.enable_grad():
            torch.autograd.grad(F.linear(x, w), (x, w), dy)

    ours()
    best = 0.0
    for attempt in range(3):  # re-measures before failing, for slow spells on a shared machine
        t = gemm_autotune.time_gemms({"plain": lambda a, b: plain(), "ours": lambda a, b: ours()}, x, w,
                                     rounds=9 * 2**attempt)
        best = max(best, t["plain"] / t["ours"])
        if best >= 0.95:
            break
    assert best >= 0.95, f"linear ran at {best:.2f}x F.linear"


@needs_onednn
@pytest.mark.parametrize("pinned_threads", [1], ids=["1-thread"], indirect=True)
def test_a_wrong_choice_is_caught_by_the_check(tuner, pinned_threads, monkeypatch):
    """The check above can fail: pin a library that is slower by construction (oneDNN's GEMM run
    three times) on one class and `verify_choices` reports it slower than torch's `mm` by more than
    5%. Pinning the class where tuning measured oneDNN slowest was not enough: on a loaded machine
    that measurement can be a slow spell, and the re-check then rightly finds oneDNN as fast."""
    _tune_model_gemms(tuner)
    classes = json.loads(cache_path().read_text())["machines"][tuner.key]["classes"]
    label, entry = next(iter(sorted(classes.items())))
    real = gemm_autotune.GEMMS["onednn"]

    def three_times(a, b):
        real(a, b)
        real(a, b)
        return real(a, b)

    monkeypatch.setitem(gemm_autotune.GEMMS, "onednn", three_times)
    tuner.force(ShapeClass(**entry["class"]), "onednn")
    rows = {r["class"]: r for r in verify_choices(tuner)}
    assert rows[label]["library"] == "onednn"
    assert rows[label]["ratio"] < 0.95, rows[label]

"""Which BLAS libraries, at which instruction set, a piece of CPU code really runs.

Why: the CPU's flags say what the chip could run, not what does. MKL picks its kernels by CPU
vendor (AVX2 code on an AVX-512 AMD Zen 5) and obeys `MKL_ENABLE_INSTRUCTIONS`; oneDNN picks by
instruction set and obeys `ONEDNN_MAX_CPU_ISA`; a model may call either. A speed ratio means
something only next to the kernels behind each side, so benchmarks print `libraries()` once and
`blas_calls(step)` for every contender, and `moelab doctor` prints `libraries()`.

Both come from the libraries' own verbose modes (`torch.backends.mkl.verbose`,
`torch.backends.mkldnn.verbose`), whose lines go to file descriptor 1; it is pointed at a temp
file meanwhile. MKL names its code path only in the header of the first verbose call of a process;
when that was printed before (`MKL_VERBOSE=1` in the environment), a fresh interpreter is asked.
"""

from __future__ import annotations

import collections
import functools
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable

import torch

_MKL_HEADER = re.compile(r"MKL_VERBOSE (?:oneMKL|Intel\(R\) MKL) ([\d.]+(?: Update \d+)?).*?\(Intel\(R\) ([\w.\-]+)\)")
# On CPUs MKL does not identify as Intel's (AMD EPYC) its header names no instruction set, only
# "Intel(R) 64 architecture Intel(R) Architecture processors": the branch it takes for them.
_MKL_GENERIC_HEADER = re.compile(r"MKL_VERBOSE (?:oneMKL|Intel\(R\) MKL) ([\d.]+(?: Update \d+)?)"
                                 r" Product build \d+ for ([^,\n]+)")
_ONEDNN_VERSION = re.compile(r"onednn_verbose,.*?info,oneDNN (v[\d.]+)")
_ONEDNN_ISA = re.compile(r"onednn_verbose,.*?info,cpu,isa:([^\n]+)")


def capture_verbose(fn: Callable[[], object]) -> str:
    """Run `fn` with MKL's and oneDNN's verbose modes on; return what they printed."""
    sys.stdout.flush()
    with tempfile.TemporaryFile() as tmp:
        saved = os.dup(1)
        os.dup2(tmp.fileno(), 1)
        try:
            with torch.backends.mkl.verbose(torch.backends.mkl.VERBOSE_ON), \
                    torch.backends.mkldnn.verbose(torch.backends.mkldnn.VERBOSE_ON):
                fn()
        finally:
            os.dup2(saved, 1)
            os.close(saved)
        tmp.seek(0)
        return tmp.read().decode("utf-8", errors="replace")


def blas_calls(fn: Callable[[], object]) -> dict:
    """GEMM calls per library while `fn` runs: MKL routines (`SGEMM`, …) and oneDNN primitive
    executions by implementation (e.g. `brg_matmul:avx2`)."""
    mkl: collections.Counter = collections.Counter()
    onednn: collections.Counter = collections.Counter()
    for line in capture_verbose(fn).splitlines():
        if line.startswith("MKL_VERBOSE ") and "(" in line.split()[1]:
            mkl[line.split()[1].split("(")[0]] += 1
        elif line.startswith("onednn_verbose,") and ",exec,cpu," in line:
            fields = line.split(",")
            onednn[f"{fields[5]} {fields[6]}"] += 1
    return {"mkl": dict(mkl), "onednn": dict(onednn), "mkl_calls": sum(mkl.values()),
            "onednn_calls": sum(onednn.values())}


def _parse_libraries(text: str) -> dict[str, str | None]:
    mkl, generic = _MKL_HEADER.search(text), _MKL_GENERIC_HEADER.search(text)
    version, isa = _ONEDNN_VERSION.search(text), _ONEDNN_ISA.search(text)
    impls = sorted({line.split(",")[6] for line in text.splitlines()
                    if line.startswith("onednn_verbose,") and ",exec,cpu," in line})
    return {
        "mkl": (f"oneMKL {mkl.group(1)}, {mkl.group(2)} code path" if mkl else
                f"oneMKL {generic.group(1)}, unnamed code path (for {generic.group(2).strip()})" if generic else None),
        "onednn": (f"oneDNN {version.group(1)}, ISA {isa.group(1).strip()}, matmul {'/'.join(impls)}"
                   if version and isa else None),
    }


_PROBE = ("import torch; a = torch.randn(64, 64); torch.mm(a, a); "
          "torch.ops.mkldnn._linear_pointwise(a, a, None, 'none', [], '')")


@functools.cache
def libraries() -> dict[str, str | None]:
    """The MKL and oneDNN actually loaded here: version and the code path (ISA) each runs, and
    ATen's own vectorisation level (elementwise kernels)."""
    a = torch.randn(64, 64)

    def probe() -> None:
        torch.mm(a, a)
        if torch.backends.mkldnn.is_available():
            torch.ops.mkldnn._linear_pointwise(a, a, None, "none", [], "")

    found = _parse_libraries(capture_verbose(probe))  # (run once per process: the headers print once)
    if found["mkl"] is None or (found["onednn"] is None and torch.backends.mkldnn.is_available()):
        env = {**os.environ, "MKL_VERBOSE": "1", "ONEDNN_VERBOSE": "1"}
        out = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, env=env, timeout=120)
        fresh = _parse_libraries(out.stdout)
        found = {k: found[k] or fresh[k] for k in found}
    return {**found, "aten": torch.backends.cpu.get_cpu_capability()}


def isa_caps() -> dict[str, str]:
    """The ISA-capping variables set for this process (as the CPU GEMM autotune keys them)."""
    from shared.kernels.gemm_autotune import ISA_ENV_VARS

    return {v: os.environ[v] for v in ISA_ENV_VARS if v in os.environ}


def isa_tag() -> str:
    """`native`, or the capped ISA (e.g. `avx2`) when `ONEDNN_MAX_CPU_ISA`/`MKL_ENABLE_INSTRUCTIONS`
    emulate a smaller machine: the suffix benchmark results are filed under."""
    caps = isa_caps()
    capped = caps.get("MKL_ENABLE_INSTRUCTIONS") or caps.get("ONEDNN_MAX_CPU_ISA") or caps.get("DNNL_MAX_CPU_ISA")
    return capped.lower().replace("_", "-") if capped else "native"


def machine_report() -> dict:
    """The CPU line of every benchmark: model, ISA flags, ISA caps and the BLAS code paths running."""
    from shared.kernels.gemm_autotune import machine_fingerprint

    fingerprint = machine_fingerprint()
    return {"cpu": fingerprint["cpu"], "isa_flags": fingerprint["isa_flags"], "isa_caps": isa_caps(),
            "blas": libraries(), "threads": torch.get_num_threads()}


def describe_calls(calls: dict) -> str:
    """`blas_calls` as one line: `MKL 396 (SGEMM 396); oneDNN 12 (inner_product brg_matmul:avx2 12)`."""
    parts = []
    for lib, key in (("MKL", "mkl"), ("oneDNN", "onednn")):
        detail = ", ".join(f"{name} {n}" for name, n in sorted(calls[key].items()))
        parts.append(f"{lib} {calls[key + '_calls']}" + (f" ({detail})" if detail else ""))
    return "; ".join(parts)


def print_machine_line() -> dict:
    """Print `machine_report()` as a benchmark's first two lines; returns it for the result JSON."""
    machine = machine_report()
    blas = machine["blas"]
    caps = " ".join(f"{k}={v}" for k, v in machine["isa_caps"].items()) or "none"
    print(f"CPU: {machine['cpu']}; ISA flags: {' '.join(machine['isa_flags'])}; ISA caps: {caps}; "
          f"{machine['threads']} threads", flush=True)
    print(f"BLAS: MKL {blas['mkl']}; oneDNN {blas['onednn']}; ATen {blas['aten']}", flush=True)
    return machine


def print_blas_calls(contenders: dict[str, Callable[[], object]]) -> dict[str, dict]:
    """One untimed run of each contender with the verbose logs on; prints and returns its `blas_calls`."""
    calls = {}
    for name, run in contenders.items():
        calls[name] = blas_calls(run)
        print(f"{name}: {describe_calls(calls[name])}", flush=True)
    return calls

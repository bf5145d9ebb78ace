"""Is bf16 fast here? What `learner.precision: auto` and `generator.dtype: auto`
ask before they choose bf16 over float32.

On a GPU, torch knows. On a CPU, bf16 only pays where the cores compute in it
(AVX512-BF16 or AMX on x86, the BF16 extension on Arm); elsewhere every bf16
operation is converted to and from float32 and runs several times slower than
float32 itself. torch's own mkldnn check also says yes for plain AVX512, so on
x86 the CPU's flags decide.
"""

from __future__ import annotations

import platform
from pathlib import Path

import torch

# /proc/cpuinfo flags of cores that compute in bf16: x86 ("flags") and Arm ("Features").
BF16_CPU_FLAGS = frozenset({"avx512_bf16", "amx_bf16", "bf16"})


def cpu_has_fast_bf16(cpuinfo: str | None = None) -> bool:
    """Whether this CPU computes in bf16. `cpuinfo`: the text of /proc/cpuinfo
    (read here when None; tests pass their own)."""
    if cpuinfo is None:
        cpuinfo = _read_cpuinfo()
    if cpuinfo is None:  # no /proc (macOS): only torch can tell, and on x86 it over-reports
        return platform.machine().lower() in ("arm64", "aarch64") and _torch_says_bf16()
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            return not BF16_CPU_FLAGS.isdisjoint(value.split())
    return False


def bf16_is_fast(device: str | None = None, cpuinfo: str | None = None) -> bool:
    """Whether bf16 beats float32 on `device` ("cuda" or "cpu"; None: cuda when
    there is a GPU). `cpuinfo`: see cpu_has_fast_bf16."""
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device.startswith("cuda"):
        return torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    return cpu_has_fast_bf16(cpuinfo)


def engine_dtype(setting: str, on_cpu: bool, cpuinfo: str | None = None) -> str:
    """vLLM's dtype for a `generator.dtype` setting. auto on a CPU: bfloat16 where the
    CPU computes in it, else float32; on a GPU, vLLM's own auto (the checkpoint's dtype)."""
    if setting != "auto" or not on_cpu:
        return setting
    return "bfloat16" if cpu_has_fast_bf16(cpuinfo) else "float32"


def _read_cpuinfo() -> str | None:
    try:
        return Path("/proc/cpuinfo").read_text()
    except OSError:
        return None


def _torch_says_bf16() -> bool:
    check = getattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", None)
    try:
        return bool(check()) if check is not None else False
    except RuntimeError:
        return False

"""`auto` precision: bf16 on a CPU only where the cores compute in it."""

import pytest
import torch

from conductor_rl.policy.precision import bf16_is_fast, cpu_has_fast_bf16, engine_dtype

AVX2_EPYC = """processor\t: 0
vendor_id\t: AuthenticAMD
model name\t: AMD EPYC 7B13
flags\t\t: fpu vme de pse tsc msr sse sse2 ssse3 fma sse4_1 sse4_2 avx f16c avx2 bmi2
"""
# AVX512F and VNNI but neither AVX512-BF16 nor AMX: torch's own mkldnn check says yes here.
AVX512_XEON = """processor\t: 0
model name\t: Intel(R) Xeon(R) CPU @ 2.20GHz
flags\t\t: fpu sse sse2 avx avx2 avx512f avx512dq avx512cd avx512bw avx512vl avx512_vnni
"""
SAPPHIRE_RAPIDS = """processor\t: 0
model name\t: Intel(R) Xeon(R) Platinum 8481C
flags\t\t: avx2 avx512f avx512bw avx512_bf16 avx512_fp16 amx_bf16 amx_tile amx_int8
"""
GRAVITON3 = """processor\t: 0
BogoMIPS\t: 2100.00
Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid sve bf16 i8mm
"""
GRAVITON2 = """processor\t: 0
Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm lrcpc dcpop
"""


@pytest.mark.parametrize(
    "cpuinfo, fast",
    [
        (AVX2_EPYC, False),
        (AVX512_XEON, False),
        (SAPPHIRE_RAPIDS, True),
        (GRAVITON3, True),
        (GRAVITON2, False),
        ("processor\t: 0\n", False),
    ],
)
def test_bf16_counts_as_fast_only_where_the_cpu_computes_in_it(cpuinfo, fast):
    assert cpu_has_fast_bf16(cpuinfo) is fast
    assert bf16_is_fast("cpu", cpuinfo) is fast


def test_only_the_flags_line_counts():
    # A model name that mentions bf16 is not a flag.
    assert not cpu_has_fast_bf16("model name\t: bf16 amx_bf16 test chip\nflags\t\t: avx2\n")


def test_this_machine_is_read_from_proc_cpuinfo():
    from pathlib import Path

    text = Path("/proc/cpuinfo").read_text()
    assert cpu_has_fast_bf16() is cpu_has_fast_bf16(text)


def test_a_gpu_answers_for_itself():
    expected = torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    assert bf16_is_fast("cuda", AVX2_EPYC) is expected


@pytest.mark.parametrize(
    "setting, on_cpu, cpuinfo, dtype",
    [
        ("auto", True, AVX2_EPYC, "float32"),
        ("auto", True, AVX512_XEON, "float32"),
        ("auto", True, SAPPHIRE_RAPIDS, "bfloat16"),
        ("auto", False, AVX2_EPYC, "auto"),  # a GPU engine keeps the checkpoint's dtype
        ("bfloat16", True, AVX2_EPYC, "bfloat16"),  # an explicit setting is obeyed
        ("float32", True, SAPPHIRE_RAPIDS, "float32"),
    ],
)
def test_the_engine_dtype_follows_the_cpu(setting, on_cpu, cpuinfo, dtype):
    assert engine_dtype(setting, on_cpu, cpuinfo) == dtype

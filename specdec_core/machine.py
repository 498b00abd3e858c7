"""What machine this is: the CPU model, the instruction sets that decide which kernels are fast, threads.

Every cost this project states depends on these, so measurements are cached per machine
(tuning.py) and the bench records them with every result.
"""

from __future__ import annotations

import functools
import hashlib
import json
import platform
from dataclasses import asdict, dataclass

import torch
import transformers

from .cpu_kernels import avx2_forced, onednn_supports

# The flags that change which kernel is fastest here: AVX2 (fbgemm int8, MKL), AVX-512 (oneDNN
# float32 blocking), AVX-512 BF16 and AMX (oneDNN bfloat16).
ISA_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile")


@dataclass(frozen=True, slots=True)
class Machine:
    cpu_model: str
    isa: tuple[str, ...]  # those of ISA_FLAGS this CPU has
    threads: int  # torch's intra-op threads
    torch_version: str
    transformers_version: str
    avx2_forced: bool  # running as on an AVX2-only CPU (cpu_kernels.force_avx2_path)
    kernel_isa: str  # what ATen's kernels use here ("AVX512", "AVX2", ...); AVX2 on an AVX-512 CPU: capped

    @property
    def kind(self) -> str:
        """A short name for people: the CPU model and the path its kernels take."""
        if self.kernel_isa == "AVX2" and "avx512f" in self.isa:
            path = "AVX2 path (an AVX-512 CPU with every kernel capped at AVX2)"
        elif self.avx2_forced:
            path = "forced AVX2 path (no oneDNN bfloat16)"
        elif "avx512_bf16" in self.isa or "amx_bf16" in self.isa:
            path = "AVX-512 with bfloat16"
        elif "avx512f" in self.isa:
            path = "AVX-512"
        else:
            path = "AVX2 only" if "avx2" in self.isa else "no AVX2"
        return f"{self.cpu_model}, {path}, {self.threads} threads"

    @property
    def key(self) -> str:
        """Identifies measurements that stay valid: same CPU, same kernels, same libraries, same threads."""
        return hashlib.sha256(json.dumps(asdict(self), sort_keys=True).encode()).hexdigest()[:16]

    def as_dict(self) -> dict:
        return {**asdict(self), "kind": self.kind}


def this_machine() -> Machine:
    model, flags = _cpuinfo()
    return Machine(
        cpu_model=model,
        isa=tuple(f for f in ISA_FLAGS if f in flags),
        threads=torch.get_num_threads(),
        torch_version=torch.__version__,
        transformers_version=transformers.__version__,
        avx2_forced=avx2_forced(),
        kernel_isa=torch.backends.cpu.get_cpu_capability(),
    )


def native_bfloat16() -> bool:
    """Whether this CPU multiplies bfloat16 in hardware (AVX-512 BF16 or AMX), on the kernel path in use:
    oneDNN also runs bfloat16 on plain AVX-512 by conversion, no faster than float32. What writing the
    corpus and training in bfloat16 need to pay (on the AVX2 path, forced or real, it is False)."""
    return onednn_supports(torch.bfloat16) and bool({"avx512_bf16", "amx_bf16"} & _cpuinfo()[1])


@functools.cache
def _cpuinfo() -> tuple[str, frozenset[str]]:
    """CPU model name and flags from /proc/cpuinfo (Linux, where this runs); the platform's name elsewhere."""
    try:
        text = open("/proc/cpuinfo", encoding="utf-8").read()
    except OSError:
        return platform.processor() or platform.machine(), frozenset()
    fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
    fields = {k.strip(): v.strip() for k, v in fields.items()}
    return fields.get("model name", platform.machine()), frozenset(fields.get("flags", "").split())

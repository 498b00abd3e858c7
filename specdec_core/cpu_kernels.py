"""CPU linear layers: oneDNN or MKL with prepacked weights, or stock, per width; int8 for drafts; forcing the AVX2 path.

A decode step on a CPU is mostly matrix products, and PyTorch's default `F.linear` there is MKL with
the weight in its plain layout. Which kernel is fastest depends on the CPU, the dtype and the row
count (an AVX2-only EPYC has no oneDNN bfloat16 at all), so nothing here decides by fixed numbers:
tuning.py times the kernels against each other on the running machine, for 1 to 9 tokens, and
applies the fastest by width with a KernelPlan; the app and bench state what it measured.

MKL_PACKED is MKL's own packed GEMM (cblas_sgemm_compute, float32 only), the op torch.compile's CPU
freezing pass emits for float32 linears. It can win at some widths and lose at others (MKL switches
kernels by row count), so it is timed per width like the others (bench/RESULTS.md, 2026-12-06,
commit 52891e6, Intel Xeon with AMX). One pack serves every row count.

The weight is reordered once into oneDNN's blocked layout, as torch.compile's CPU "freezing" pass
does; calling the same two ops directly avoids compiling a model whose cache length changes every
step. The packed copy is rebuilt whenever the weight changes (a dtype cast, an in-place edit), so
it can never go stale. Packing alone keeps two copies of each weight; models.py then calls
release_dense_weights, which frees the dense ones that nothing else reads. A released weight is
refused, on every CPU, if anything asks to compute with it in another dtype. Inference only: the
oneDNN op has no backward (the draft head trains through stock nn.Linear, see training/train_head.py).
"""

from __future__ import annotations

import functools
import itertools
import os
import types
import warnings
import weakref
from dataclasses import dataclass

import torch
import torch.nn.functional as F

PACKED, STOCK, INT8, MKL_PACKED = "packed", "stock", "int8", "mkl-packed"
PACKED_KERNELS = (PACKED, MKL_PACKED)  # the kernels that compute from a packed copy of the weight
MKL_PACK_ROWS = 8  # the row count MKL packs for; the pack computes every row count (from 2 on bit for bit alike)

# kernel -> module -> ((data_ptr, dtype, version) of the weight it was packed from, what that kernel reads)
_packed: dict[str, weakref.WeakKeyDictionary[torch.nn.Linear, tuple[tuple, object]]] = {
    kernel: weakref.WeakKeyDictionary() for kernel in PACKED_KERNELS
}


# Set (SPECDEC_FORCE_AVX2=1, or force_avx2_path) to run as on a CPU without AVX-512: no oneDNN
# bfloat16. Tests and the bench use it so that one machine exercises and measures both paths.
_avx2_forced = os.environ.get("SPECDEC_FORCE_AVX2", "") not in ("", "0")

# SPECDEC_FORCE_AVX2=1 at start does more: it caps the whole process at AVX2, as an AVX2-only CPU runs
# (oneDNN's float32 kernels, MKL and ATen's own vectorised ops included). The libraries read these when
# first used, so specdec_core imports this module before anything computes; force_avx2_path, within a
# running process (the tests' cpu_path), can only turn oneDNN bfloat16 off.
AVX2_CAPS = {"ONEDNN_MAX_CPU_ISA": "AVX2", "MKL_ENABLE_INSTRUCTIONS": "AVX2", "ATEN_CPU_CAPABILITY": "avx2"}
if _avx2_forced:
    for _name, _value in AVX2_CAPS.items():
        os.environ.setdefault(_name, _value)


def force_avx2_path(forced: bool) -> None:
    global _avx2_forced
    _avx2_forced = forced


def avx2_forced() -> bool:
    return _avx2_forced


@functools.cache
def _hardware_supports(dtype: torch.dtype) -> bool:
    if not torch.backends.mkldnn.is_available():
        return False
    if dtype == torch.float32:
        return True
    if dtype == torch.bfloat16:
        return torch.ops.mkldnn._is_mkldnn_bf16_supported()
    return False  # float16 needs AVX-512 FP16 / AVX-NE-CONVERT, which these CPUs lack


def onednn_supports(dtype: torch.dtype) -> bool:
    """Whether oneDNN has a fast path for dtype here (float32 anywhere; bfloat16 needs AVX-512)."""
    if _avx2_forced and dtype == torch.bfloat16:
        return False
    return _hardware_supports(dtype)


def supports(kernel: str, dtype: torch.dtype) -> bool:
    """Whether kernel computes in dtype here; where it does not, a linear asked for it runs stock."""
    if kernel == PACKED:
        return onednn_supports(dtype)
    if kernel == MKL_PACKED:
        return dtype == torch.float32 and torch.backends.mkl.is_available()
    return True


def _reorder(kernel: str, weight: torch.Tensor) -> object:
    if kernel == PACKED:
        return torch.ops.mkldnn._reorder_linear_weight(weight, None)
    # MKL's op takes the plain weight too, for its shape and dtype and for row counts other than the one it is
    # told the pack was made for (_linear always tells it the rows it gets, so the pack computes). A zero-strided
    # stand-in of the same shape and dtype keeps a third copy of the weights from living on (a test holds that
    # the stand-in is never computed with).
    stand_in = torch.zeros((), dtype=weight.dtype).expand(weight.shape)
    return torch.ops.mkl._mkl_reorder_linear_weight(weight, MKL_PACK_ROWS), stand_in


def _packed_weight(module: torch.nn.Linear, kernel: str = PACKED) -> object:
    store, weight = _packed[kernel], module.weight
    if weight.is_meta:  # dense copy released: the packed one is all there is
        entry = store.get(module)
        if entry is None or entry[0][1] != weight.dtype:
            raise RuntimeError("This linear layer's dense weight was released; reload the model to change it.")
        return entry[1]
    key = (weight.data_ptr(), weight.dtype, weight._version)
    entry = store.get(module)
    if entry is None or entry[0] != key:
        entry = (key, _reorder(kernel, weight.detach()))
        store[module] = entry
    return entry[1]


@dataclass(frozen=True, slots=True)
class KernelPlan:
    """Which kernel a model's linears use by the number of rows a pass computes: PACKED (oneDNN, prepacked),
    MKL_PACKED (MKL, prepacked) or STOCK (F.linear). tuning.py picks each by timing them."""

    single: str = PACKED  # one row: a decode step
    wide: str = PACKED  # more rows than `narrow` covers: a verification pass
    # Row counts computed one row wider, where a pass over them costs more than over one row more: a library's
    # kernel for that row count is slow (oneDNN's float32 for 2 rows on the AMD EPYC (AVX-512), bench/RESULTS.md,
    # 2026-12-05), and would make k = 1 drafts and probes dearer than k = 3. tuning.py finds them from the measured
    # curve; the padded row's output is dropped.
    padded_rows: tuple[int, ...] = ()
    # The kernel for 2, 3, ... rows, where it is not `wide`'s: the fastest kernel changes with the row count (on the
    # Intel Xeon with AMX, MKL's plain one up to 3 rows and oneDNN's from 4; bench/RESULTS.md, 2026-12-06, commit
    # c0ad8ed), and one kernel for every width past one row makes a one-token draft's check far dearer than a plain
    # step.
    narrow: tuple[str, ...] = ()

    def kernel(self, rows: int) -> str:
        if rows <= 1:
            return self.single
        return self.narrow[rows - 2] if rows - 2 < len(self.narrow) else self.wide

    def describe(self, widest: int) -> str:
        """'stock for 1-3 tokens, packed for 4-17': the kernel by width, up to widest."""
        spans = []
        for kernel, run in itertools.groupby(range(1, widest + 1), key=self.kernel):
            widths = list(run)
            span = f"{widths[0]}-{widths[-1]}" if len(widths) > 1 else f"{widths[0]}"
            spans.append(f"{kernel} for {span} token{'' if widths[-1] == 1 else 's'}")
        return ", ".join(spans) + "".join(f", {n} rows computed as {n + 1}" for n in self.padded_rows)

    @property
    def kernels(self) -> set[str]:
        return {self.single, self.wide, *self.narrow}

    @property
    def needs_dense(self) -> bool:
        return STOCK in self.kernels


# module -> its plan; modules without one use PACKED wherever oneDNN supports their dtype
_plans: weakref.WeakKeyDictionary[torch.nn.Linear, KernelPlan] = weakref.WeakKeyDictionary()
_DEFAULT_PLAN = KernelPlan()


def set_kernel_plan(model: torch.nn.Module, plan: KernelPlan) -> None:
    """Applies plan to every patched linear of model: packs the copies it reads now (so the memory it takes shows at
    load, and no first pass over a new width pays for packing) and drops those it never reads."""
    for module in _patched_linears(model):
        _plans[module] = plan
        if module.weight.is_meta:
            continue
        for kernel in PACKED_KERNELS:
            if kernel not in plan.kernels:
                _packed[kernel].pop(module, None)
            elif supports(kernel, module.weight.dtype):
                _packed_weight(module, kernel)


def _prepacked_linear(self: torch.nn.Linear, x: torch.Tensor) -> torch.Tensor:
    plan = _plans.get(self, _DEFAULT_PLAN)
    rows = x.numel() // x.shape[-1]
    if rows in plan.padded_rows:  # the rows of every batch row together, as the kernel sees them
        flat = x.reshape(rows, x.shape[-1])
        return _linear(self, torch.cat([flat, flat[-1:]]), plan.kernel(rows + 1))[:rows].reshape(*x.shape[:-1], -1)
    return _linear(self, x, plan.kernel(rows))


def _linear(self: torch.nn.Linear, x: torch.Tensor, kernel: str) -> torch.Tensor:
    # A released (meta) weight always goes through _packed_weight, which refuses it unless its packed
    # copy matches: F.linear on a meta weight would "compute" a meta tensor instead of failing.
    if kernel == MKL_PACKED and supports(MKL_PACKED, self.weight.dtype):
        packed, stand_in = _packed_weight(self, MKL_PACKED)
        return torch.ops.mkl._mkl_linear(x, packed, stand_in, self.bias, x.numel() // x.shape[-1])
    if self.weight.is_meta or (kernel == PACKED and onednn_supports(self.weight.dtype)):
        return torch.ops.mkldnn._linear_pointwise(x, _packed_weight(self), self.bias, "none", [], "")
    return F.linear(x, self.weight, self.bias)


def _patched_linears(model: torch.nn.Module) -> list[torch.nn.Linear]:
    return [
        m
        for m in model.modules()
        if type(m) is torch.nn.Linear and "forward" in m.__dict__ and m.forward.__func__ is _prepacked_linear
    ]


def release_dense_weights(model: torch.nn.Module) -> torch.nn.Module:
    """Frees the plain-layout copy of every packed weight that nothing else reads, so that packing
    does not double the model's memory. A weight shared with another module (an lm_head tied to
    the input embedding) stays dense. The module keeps a meta tensor of the same shape and dtype,
    so shapes can still be read; a later dtype cast or in-place edit is refused, not silently
    wrong. Inference only, like the packing itself."""
    linears = [m for m in _patched_linears(model) if not _plans.get(m, _DEFAULT_PLAN).needs_dense]
    # Weights that some module other than a single packed Linear reads: tied embeddings and the like.
    readers: dict[int, int] = {}
    for module in model.modules():
        for param in module.parameters(recurse=False):
            readers[param.data_ptr()] = readers.get(param.data_ptr(), 0) + 1
    for module in linears:
        weight = module.weight
        kernels = _plans.get(module, _DEFAULT_PLAN).kernels
        if weight.is_meta or readers[weight.data_ptr()] > 1 or not all(supports(k, weight.dtype) for k in kernels):
            continue
        packs = {kernel: _packed_weight(module, kernel) for kernel in kernels}
        module.weight = torch.nn.Parameter(
            torch.empty(weight.shape, dtype=weight.dtype, device="meta"), requires_grad=False
        )
        for kernel, packed in packs.items():
            _packed[kernel][module] = ((0, weight.dtype, 0), packed)
    # from_pretrained maps the weights file into memory and every weight is a view of that one
    # mapping: while any view lives (the tied embedding, the norms) the whole file stays mapped and,
    # once packing has read it, resident. Copies of what is kept let the mapping go.
    with torch.no_grad():
        for tensor in [*model.parameters(), *model.buffers()]:
            if not tensor.is_meta and tensor.device.type == "cpu":
                tensor.data = tensor.data.clone()
    return model


def linear_weight_bytes(model: torch.nn.Module) -> int:
    """Bytes of one copy of the patched linears' weights: what each packed kernel a plan uses adds."""
    return sum(m.weight.numel() * m.weight.element_size() for m in _patched_linears(model))


def resident_bytes(model: torch.nn.Module) -> int:
    """Bytes a model holds: its tensors that are not released, plus every packed copy its linears keep (a
    plan with stock, oneDNN and MKL widths keeps three copies of each weight)."""
    tensors = {
        t.data_ptr(): t.numel() * t.element_size() for t in [*model.parameters(), *model.buffers()] if not t.is_meta
    }
    packs = sum(
        m.weight.numel() * m.weight.element_size()
        for m in _patched_linears(model)
        for kernel in PACKED_KERNELS
        if m in _packed[kernel]
    )
    return sum(tensors.values()) + packs


def speed_up_linears(model: torch.nn.Module) -> torch.nn.Module:
    """Patches the model's Linear layers in place when it runs on a CPU; a no-op elsewhere.

    Packs the weights now, so that the first timed pass does not pay for it."""
    if next(model.parameters()).device.type != "cpu":
        return model
    for module in model.modules():
        if type(module) is torch.nn.Linear:
            module.forward = types.MethodType(_prepacked_linear, module)
            if onednn_supports(module.weight.dtype):
                _packed_weight(module)
    return model


def quantize_linears_int8(model: torch.nn.Module) -> torch.nn.Module:
    """int8 dynamic quantization of every nn.Linear, in place (torch.ao; its x86/fbgemm kernels need
    only AVX2). For drafts only: it changes their guesses slightly, never the verified output."""
    with warnings.catch_warnings():  # torch.ao.quantization is deprecated in favour of torchao, not installed here
        warnings.simplefilter("ignore")
        return torch.ao.quantization.quantize_dynamic(model, {torch.nn.Linear}, dtype=torch.qint8, inplace=True)

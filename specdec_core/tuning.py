"""Costs measured on the machine that runs: the kernels to use, and what a target pass over n tokens costs.

Which kernel is fastest differs between CPUs (oneDNN's bfloat16 needs AVX-512; MKL's float32 is
slow for 2-9 rows on some CPUs and not on others), and speculation's gain depends on the
verification cost curve T(n) / T(1). So both are timed at load, on the shapes a run uses, and
kept on disk per machine (machine.py: CPU model, ISA flags, threads, library versions): the first
start on a machine pays a few seconds, later starts read a file. The choice is logged with its
timings. Nothing here changes what a model computes beyond its kernels' rounding: the target
stays float32 on a CPU; a draft may take any precision, since verification keeps the output exact.
"""

from __future__ import annotations

import logging
import statistics
import weakref
from collections.abc import Callable
from dataclasses import dataclass, replace

import torch
from transformers import PreTrainedModel

from .costs import CONTEXT_TOKENS, LONG_CONTEXT_TOKENS, LONGEST_VERIFICATION, CostCurve, non_decreasing
from .cpu_kernels import MKL_PACKED, PACKED, STOCK, KernelPlan, linear_weight_bytes, set_kernel_plan, supports
from .lean_pass import is_lean
from .limits import context_window
from .machine import this_machine
from .measurements import cached
from .pass_clock import PassClock
from .sources import memory_budget

log = logging.getLogger(__name__)

REPEATS = 5  # interleaved over widths, so that drift of a busy machine hits every width alike
NARROW_ROUNDS = 3  # the cost curve's passes over up to KERNEL_WIDTHS tokens get this many times REPEATS (_time_widths)
# Kernels are timed for passes over 1..KERNEL_WIDTHS tokens; the widest one's serves every wider pass. Libraries
# change kernel at a few rows (bench/RESULTS.md: oneDNN's float32 at 2 on the AMD EPYC (AVX-512), 2026-12-05; MKL's
# plain one past 3 and its packed one past 8 on the Intel Xeon with AMX, 2026-12-06), and trees and the hybrid
# verify 4-8 tokens at a time.
KERNEL_WIDTHS = 9
KERNELS = (PACKED, STOCK, MKL_PACKED)  # the target's candidates, timed where they run (cpu_kernels.supports)
PADDING_GAIN = 1.05  # a width is computed one row wider (KernelPlan.padded_rows) where that pass is this much cheaper


@dataclass(frozen=True, slots=True)
class Choice:
    """One measured decision: every candidate's median seconds and the one kept."""

    part: str
    chosen: str
    seconds: dict[str, float]
    note: str = ""

    def describe(self, timings: bool = True) -> str:
        """As "part: chosen (each timing, fastest first); note"; without the timings where a view shows them
        otherwise."""
        listed = ", ".join(
            f"{name} {1000 * s:.2f} ms" for name, s in sorted(self.seconds.items(), key=lambda kv: kv[1])
        )
        return f"{self.part}: {self.chosen}{f' ({listed})' if timings else ''}{'; ' + self.note if self.note else ''}"


# The pass a target runs, as its tuning's "pass" names it: what the Explainer says runs.
PASSES = {
    "lean": "the lean pass (lean_pass.py: fused q/k/v and gate/up, packed kernels), run eagerly",
    "transformers": "transformers' own forward with packed kernels, run eagerly",
    "compiled": "the static pass compiled ahead of time by AOTInductor (compiled_pass.py) for the widths where it "
    "measured faster than the lean pass, the lean pass for the others",
}


@dataclass(frozen=True, slots=True)
class TargetTuning:
    plan: KernelPlan
    kernels: Choice
    curve: CostCurve
    pass_in_use: str = "lean"  # a key of PASSES


# loaded model -> what was measured for it (the engine's adaptive k reads it); the same by (source, dtype)
# for the app, which knows models by their source
_tunings: weakref.WeakKeyDictionary[PreTrainedModel, TargetTuning] = weakref.WeakKeyDictionary()
_tunings_by_source: dict[tuple[str, str], TargetTuning] = {}
# (target source, drafter spec) -> one draft pass, measured at load, and how the drafter runs
_draft_passes: dict[tuple[str, str], tuple[float, str]] = {}


def cost_curve(model: PreTrainedModel) -> CostCurve | None:
    """The measured verification cost curve of a loaded target; None where none was measured (tests' tiny models)."""
    tuning = _tunings.get(model)
    return tuning.curve if tuning else None


def tuning_of(source: str, dtype: torch.dtype) -> TargetTuning | None:
    """What was measured when the model from source was loaded in dtype; None if it is not loaded yet."""
    return _tunings_by_source.get((source, str(dtype)))


def record_draft_pass(target_source: str, drafter: str, seconds: float, how: str = "") -> None:
    _draft_passes[(target_source, drafter)] = (seconds, how)


def draft_pass(target_source: str, drafter: str) -> tuple[float, str] | None:
    """(seconds of one draft pass, how the drafter runs) measured at load; None before."""
    return _draft_passes.get((target_source, drafter))


def c_at_load(target_source: str, target_dtype: torch.dtype, drafter: str) -> float | None:
    """c measured at load: one draft pass over one single-token target pass; None before both were measured."""
    target, draft = tuning_of(target_source, target_dtype), draft_pass(target_source, drafter)
    return None if target is None or draft is None else draft[0] / target.curve.seconds[0]


# ---- the target ---------------------------------------------------------------------------------------


def tune_target(model: PreTrainedModel, name: str, served: bool = True) -> TargetTuning:
    """Picks the fastest kernel for the linears per width up to KERNEL_WIDTHS tokens (the widest's for every wider
    pass), then measures T(n) for n = 1..17 with them, behind CONTEXT_TOKENS cached tokens and, where the model is
    served and its window holds it, LONG_CONTEXT_TOKENS.

    served: the model known by its source (tuning_of; the app's labels, every c): not a copy loaded for
    transformers' generate, whose pass and costs differ from the served one of the same source and dtype.
    Call before cpu_kernels.release_dense_weights: the stock candidate reads the dense weights."""
    dtype = next(model.parameters()).dtype
    candidates = _kernel_candidates(model, dtype)
    identity = {
        **_pass_identity(model, candidates),
        # a copy for transformers' generate is never served: nothing reads its curve behind a long context
        "contexts": [CONTEXT_TOKENS, LONG_CONTEXT_TOKENS] if served else [CONTEXT_TOKENS],
        "plan": "kernels by width and padded rows",
        "timing": "settled T(1), ratios by round",
    }

    def measure() -> dict:
        on_cpu = model.device.type == "cpu"
        kernels, plan = _timed_plan(model, candidates)
        set_kernel_plan(model, plan)
        widths = range(1, LONGEST_VERIFICATION + 1)
        raw = _time_widths(model, widths, REPEATS, CONTEXT_TOKENS, NARROW_ROUNDS)
        if on_cpu and (padded := _padded_rows(raw)):
            plan = replace(plan, padded_rows=padded)
            set_kernel_plan(model, plan)
            raw = _time_widths(model, widths, REPEATS, CONTEXT_TOKENS, NARROW_ROUNDS)
        short = non_decreasing(raw)
        long_curve = (
            None  # a window too short to hold the long context (tiny test models, GPT-2's 1,024): the short curve alone
        )
        if served and context_window(model) >= LONG_CONTEXT_TOKENS + LONGEST_VERIFICATION:
            long = non_decreasing(_time_widths(model, widths, REPEATS, LONG_CONTEXT_TOKENS, NARROW_ROUNDS))
            # A longer context never makes a pass cheaper: where its median came out lower, that was noise.
            long_curve = [max(s, t) for s, t in zip(short, long)]
        plan_fields = [plan.single, plan.wide, list(plan.padded_rows), list(plan.narrow)]
        return {"kernels": kernels, "plan": plan_fields, "curve": short, "long_curve": long_curve}

    result, from_disk = cached("target", identity, measure)
    plan = _plan_of(result["plan"])
    set_kernel_plan(model, plan)
    choice = Choice(
        "target linears",
        plan.describe(LONGEST_VERIFICATION),
        result["kernels"],
        _where(from_disk),
    )
    long_curve = result.get("long_curve")
    curve = CostCurve(tuple(result["curve"]), tuple(long_curve) if long_curve else None)
    tuning = TargetTuning(plan, choice, curve, identity["pass"])
    _tunings[model] = tuning
    if served:
        _tunings_by_source[(name, str(dtype))] = tuning
    curve = tuning.curve
    log.info(
        "%s on %s: %s; %s behind %d tokens",
        name,
        this_machine().kind,
        choice.describe(),
        curve.describe(),
        CONTEXT_TOKENS,
    )
    if curve.long_seconds is not None:
        log.info("  behind %d tokens: %s", LONG_CONTEXT_TOKENS, curve.at(LONG_CONTEXT_TOKENS).describe())
    return tuning


def use_pass(model: PreTrainedModel, source: str, pass_in_use: str, curve: CostCurve) -> None:
    """Records that the served model now runs another pass (compile_jobs.py), whose costs later runs read."""
    tuning = replace(_tunings[model], curve=curve, pass_in_use=pass_in_use)
    _tunings[model] = tuning
    _tunings_by_source[(source, str(next(model.parameters()).dtype))] = tuning


def tune_kernels(model: PreTrainedModel, name: str) -> Choice:
    """A copy of the target made to draft: the fastest kernel per width, as for a target, and no cost curve. A draft
    runs one-token passes and the target's own copies take its cache entries for the tokens they missed, so its one
    pass (timed where its c is recorded, drafters/model_draft.measure_draft_pass) is all of its costs a run reads.
    Call before cpu_kernels.release_dense_weights."""
    candidates = _kernel_candidates(model, next(model.parameters()).dtype)

    def measure() -> dict:
        kernels, plan = _timed_plan(model, candidates)
        return {"kernels": kernels, "plan": [plan.single, plan.wide, [], list(plan.narrow)]}

    result, from_disk = cached("kernels", _pass_identity(model, candidates), measure)
    plan = _plan_of(result["plan"])
    set_kernel_plan(model, plan)
    choice = Choice(f"{name} linears", plan.describe(KERNEL_WIDTHS), result["kernels"], _where(from_disk))
    log.info("%s on %s: %s", name, this_machine().kind, choice.describe())
    return choice


def _pass_identity(model: PreTrainedModel, candidates: list[str]) -> dict:
    """What a pass's cost follows from besides the machine: the shapes, the dtype, the pass and the kernels timed.
    Not the model's name or weights: models of one architecture (a preset's hub id and the embedded model) share
    one tuning."""
    return {
        "dtype": str(next(model.parameters()).dtype),
        "config": model.config.to_json_string(use_diff=True),
        "pass": "lean" if is_lean(model) else "transformers",
        "kernels": [*candidates, KERNEL_WIDTHS],
    }


def _plan_of(fields: list) -> KernelPlan:
    single, wide, padded, narrow = fields
    return KernelPlan(single, wide, tuple(padded), tuple(narrow))


def _where(from_disk: bool) -> str:
    return "read from the tuning cache" if from_disk else "measured now"


def _kernel_candidates(model: PreTrainedModel, dtype: torch.dtype) -> list[str]:
    """The kernels worth timing: those that run dtype here. MKL's packed GEMM keeps a copy of every weight beside
    the dense one and oneDNN's (both already in memory while tuning), so it is a candidate only where the memory
    free for models holds that copy too: a plan that uses all three keeps three copies (a 1.7B float32 model: 20 GB)."""
    if model.device.type != "cpu":
        return []
    candidates = [kernel for kernel in KERNELS if supports(kernel, dtype)]
    if MKL_PACKED in candidates and linear_weight_bytes(model) > memory_budget(0):
        candidates.remove(MKL_PACKED)
    return candidates


def kernel_key(kernel: str, width: int) -> str:
    """A kernel's timing's name among the target's kernel timings: "packed x3"."""
    return f"{kernel} x{width}"


@torch.inference_mode()
def _time_kernels(model: PreTrainedModel, kernels: list[str]) -> dict[str, float]:
    """Median seconds of a pass over 1..KERNEL_WIDTHS tokens with each kernel everywhere, behind one context read
    once. Each kernel's shapes are warmed up once; then the kernels take turns within every repeat, so that a busy
    moment of a shared machine hits them alike, each turn opened by an untimed one-token pass (_time_widths)."""
    times: dict[str, list[float]] = {}
    widths = range(1, KERNEL_WIDTHS + 1)
    clock = PassClock(model, CONTEXT_TOKENS, KERNEL_WIDTHS)
    for kernel in kernels:
        set_kernel_plan(model, KernelPlan(kernel, kernel))
        clock.warm(widths)
    for _ in range(REPEATS):
        for kernel in kernels:
            set_kernel_plan(model, KernelPlan(kernel, kernel))
            clock.time(1)
            for width in widths:
                times.setdefault(kernel_key(kernel, width), []).append(clock.time(width))
    return {name: statistics.median(values) for name, values in times.items()}


def _timed_plan(model: PreTrainedModel, candidates: list[str]) -> tuple[dict[str, float], KernelPlan]:
    """The candidates' timings (none where there is nothing to choose between) and the plan they give."""
    kernels = _time_kernels(model, candidates) if len(candidates) > 1 else {}
    return kernels, _plan_from(kernels)


def _padded_rows(seconds: list[float]) -> tuple[int, ...]:
    """The widths n >= 2 whose pass (seconds[n - 1]) costs PADDING_GAIN times more than one over n + 1: a
    kernel choice of the library for that row count, which computing one row more avoids."""
    return tuple(n for n in range(2, len(seconds)) if seconds[n - 1] > PADDING_GAIN * seconds[n])


def _plan_from(kernels: dict[str, float]) -> KernelPlan:
    """The fastest kernel per width timed, the widest's for every wider pass; STOCK where nothing was timed
    (no packed kernel for the dtype, or not a CPU)."""

    def best(width: int) -> str:
        timed = {k: kernels[kernel_key(k, width)] for k in KERNELS if kernel_key(k, width) in kernels}
        return min(timed, key=timed.__getitem__) if timed else STOCK

    wide = best(KERNEL_WIDTHS)
    narrow = [best(width) for width in range(2, KERNEL_WIDTHS)]
    while narrow and narrow[-1] == wide:  # only what differs from the wide kernel
        narrow.pop()
    return KernelPlan(best(1), wide, (), tuple(narrow))


@torch.inference_mode()
def _time_widths(
    model: PreTrainedModel, widths, repeats: int, context_tokens: int = CONTEXT_TOKENS, narrow_rounds: int = 1
) -> list[float]:
    """Seconds of one pass over n new tokens, per n in widths (from 1), behind context_tokens cached ones.

    Timed in rounds over the widths, each opened by an untimed one-token pass: right after a wide pass a one-token
    pass reads dearer than a decode step pays (10-20% on the Intel Xeon with AMX, bench/RESULTS.md, 2026-12-06),
    which would make every T(n)/T(1) that much too low. Each width's figure is its median
    ratio to its own round's T(1), times the median T(1): a machine whose speed drifts between rounds moves the
    ratios less than the medians. The widths up to KERNEL_WIDTHS get narrow_rounds times as many rounds: adaptive
    k chooses between one, two and three draft tokens on their ratios, and a few rounds leave those ratios to
    timing noise."""
    widths = list(widths)
    clock = PassClock(model, context_tokens, max(widths))
    clock.warm(widths)
    singles: list[float] = []
    ratios: dict[int, list[float]] = {n: [] for n in widths if n > 1}
    for round_ in range(repeats * narrow_rounds):
        clock.time(1)  # untimed: settles the one-token pass after the round before's widest
        single = clock.time(1)
        singles.append(single)
        for n in ratios:
            if round_ < repeats or n <= KERNEL_WIDTHS:
                ratios[n].append(clock.time(n) / single)
    single = statistics.median(singles)
    return [single if n == 1 else single * statistics.median(ratios[n]) for n in widths]


# ---- drafts -------------------------------------------------------------------------------------------


def choose_fastest(
    part: str, identity: dict, builders: dict[str, Callable[[], object]], time_one: Callable[[object], float]
) -> tuple[object, Choice]:
    """Builds each candidate, times it with time_one, keeps the fastest (cached per machine), rebuilds it."""

    def measure() -> dict:
        return {name: time_one(build()) for name, build in builders.items()}

    seconds, from_disk = cached(part.replace(" ", "-"), {**identity, "candidates": sorted(builders)}, measure)
    chosen = min(seconds, key=seconds.__getitem__)
    choice = Choice(part, chosen, seconds, _where(from_disk))
    log.info("%s on %s: %s", part, this_machine().kind, choice.describe())
    return builders[chosen](), choice

"""Costs measured on the running machine: the kernel choice, the verification cost curve, their cache."""

import json
import time

import pytest
import torch

from specdec_core import pass_clock, tuning
from specdec_core.costs import CostCurve, non_decreasing
from specdec_core.cpu_kernels import MKL_PACKED, PACKED, STOCK, KernelPlan, speed_up_linears, supports
from specdec_core.machine import ISA_FLAGS, this_machine
from specdec_core.tuning import (
    Choice,
    _padded_rows,
    _plan_from,
    choose_fastest,
    cost_curve,
    tune_kernels,
    tune_target,
)
from tests.conftest import tiny_llama


def testnon_decreasing_fit_pools_dips_and_keeps_rising_values():
    assert non_decreasing([1.0, 2.0, 3.0]) == [1.0, 2.0, 3.0]
    assert non_decreasing([3.0, 1.0]) == [2.0, 2.0]
    fitted = non_decreasing([1.0, 1.3, 1.4, 1.2, 1.3, 1.1, 1.6])
    assert fitted == sorted(fitted) and sum(fitted) == pytest.approx(8.9)  # least squares keeps the mean


def test_cost_curve_ratios_start_at_one_and_go_on_along_the_upper_half_s_mean_step_past_the_widest():
    curve = CostCurve((0.05, 0.06, 0.08))
    assert curve.ratio(1) == 1.0 and curve.ratio(3) == pytest.approx(1.6)
    assert curve.ratio(5) == pytest.approx((0.08 + 2 * 0.015) / 0.05)  # a pass wider than any measured is dearer still
    assert CostCurve((0.05,)).ratio(9) == 1.0
    # A flat top, as the non-decreasing fit pools a noisy one, still rises past the widest: along T(3) to T(6).
    pooled = CostCurve((0.05, 0.06, 0.08, 0.10, 0.10, 0.10))
    assert pooled.ratio(8) == pytest.approx((0.10 + 2 * 0.02 / 3) / 0.05)
    assert (
        curve.describe()
        == f"T(5)/T(1) = 2.20, T(9)/T(1) = 3.40, T({tuning.LONGEST_VERIFICATION})/T(1) = {curve.ratio(17):.2f}"
    )


def test_cost_curve_at_a_context_runs_linearly_from_the_short_curve_to_the_long_one_and_beyond():
    short, long = (0.050, 0.050, 0.060), (0.060, 0.072, 0.096)
    curve = CostCurve(short, long)
    assert curve.at(tuning.CONTEXT_TOKENS) == curve.at(10) == CostCurve(short)  # no shorter curve was measured
    assert curve.at(tuning.LONG_CONTEXT_TOKENS).seconds == pytest.approx(long)
    middle = (tuning.CONTEXT_TOKENS + tuning.LONG_CONTEXT_TOKENS) // 2
    assert curve.at(middle).ratio(3) == pytest.approx(
        0.078 / 0.055, rel=1e-2
    )  # halfway: (0.060 + 0.096) / (0.050 + 0.060)
    far = curve.at(2 * tuning.LONG_CONTEXT_TOKENS)
    assert (
        far.ratio(3) > curve.at(tuning.LONG_CONTEXT_TOKENS).ratio(3) > curve.ratio(3)
    )  # wide passes dearer with context
    assert far.ratios == sorted(far.ratios)
    assert CostCurve(short).at(5000) == CostCurve(short)  # nothing measured behind a long context: the short curve


def test_step_costs_count_verification_at_the_context_and_c_in_that_context_s_passes():
    short, long = (0.050, 0.050, 0.060), (0.100, 0.120, 0.160)
    curve = CostCurve(short, long)
    near = curve.step_costs(tuning.CONTEXT_TOKENS, c=0.2)
    assert near.c == pytest.approx(0.2) and near.step(3, 2) == pytest.approx(1.2 + 2 * 0.2)
    far = curve.step_costs(tuning.LONG_CONTEXT_TOKENS, c=0.2)
    assert far.c == pytest.approx(0.1)  # the target's one-token pass doubled: a draft pass is half as many of them
    assert far.step(3, 2) == pytest.approx(1.6 + 2 * 0.1) and far.step(1, 0) == 1.0


def timings(packed: list[float], stock: list[float], mkl_packed: list[float] | None = None) -> dict[str, float]:
    """Each kernel's seconds by width, from 1; a row shorter than KERNEL_WIDTHS goes on flat from its last width."""

    def widths(row: list[float]) -> list[float]:
        return row + row[-1:] * (tuning.KERNEL_WIDTHS - len(row))

    rows = (("packed", packed), ("stock", stock), ("mkl-packed", mkl_packed or []))
    return {f"{kernel} x{width}": s for kernel, row in rows for width, s in enumerate(widths(row), 1)}


def test_plan_takes_the_faster_kernel_per_width():
    assert _plan_from(timings([0.05, 0.08, 0.08, 0.08, 0.09], [0.06, 0.07, 0.07, 0.07, 0.07])) == KernelPlan(
        PACKED, STOCK
    )
    # The Intel Xeon with AMX: MKL's kernel is flat up to 3 rows, oneDNN's faster from 4
    xeon = _plan_from(timings([0.053, 0.056, 0.056, 0.060, 0.059], [0.045, 0.045, 0.048, 0.066, 0.068]))
    assert xeon == KernelPlan(STOCK, PACKED, (), (STOCK, STOCK))
    assert [xeon.kernel(rows) for rows in range(1, 8)] == [STOCK, STOCK, STOCK, PACKED, PACKED, PACKED, PACKED]
    assert xeon.describe(17) == "stock for 1-3 tokens, packed for 4-17 tokens"
    # a width between two of the wide kernel's keeps its own
    assert _plan_from(timings([0.05, 0.07, 0.05, 0.05, 0.05], [0.06, 0.06, 0.06, 0.06, 0.06])).narrow == (STOCK,)
    assert _plan_from({}) == KernelPlan(STOCK, STOCK)  # nothing timed: no oneDNN, or not a CPU


def test_plan_takes_mkls_packed_gemm_where_it_is_fastest():
    # The Intel Xeon with AMX, 2026-12-06, commit 52891e6 (ms, widths 1-9): MKL's packed GEMM wins 4-8 tokens,
    # loses from 9
    packed = [56.5, 58.9, 59.3, 60.7, 61.8, 64.7, 68.0, 70.2, 69.6]
    stock = [45.3, 48.0, 50.8, 68.7, 70.6, 73.0, 81.2, 83.3, 90.7]
    mkl = [47.1, 51.8, 55.4, 53.3, 59.0, 59.2, 61.8, 61.7, 79.3]
    plan = _plan_from(timings(packed, stock, mkl))
    assert [plan.kernel(rows) for rows in range(1, 12)] == [STOCK] * 3 + [MKL_PACKED] * 5 + [PACKED] * 3
    assert plan.describe(17) == "stock for 1-3 tokens, mkl-packed for 4-8 tokens, packed for 9-17 tokens"


def test_mkls_packed_gemm_is_timed_only_where_memory_holds_its_copy(monkeypatch):
    model = speed_up_linears(tiny_llama(seed=0))
    monkeypatch.setenv("SPECDEC_MEMORY_BUDGET_GB", "16")
    assert (MKL_PACKED in tuning._kernel_candidates(model, torch.float32)) == torch.backends.mkl.is_available()
    assert MKL_PACKED not in tuning._kernel_candidates(model, torch.bfloat16)  # MKL packs float32 alone
    budget = tuning.linear_weight_bytes(model) - 1  # a byte short of one more copy of its weights
    monkeypatch.setenv("SPECDEC_MEMORY_BUDGET_GB", str(budget / 2**30))
    assert tuning._kernel_candidates(model, torch.float32) == [k for k in (PACKED, STOCK) if supports(k, torch.float32)]


def test_a_choice_lists_its_timings_fastest_first_unless_a_view_shows_them_otherwise():
    choice = Choice("target linears", "stock for 1-3 tokens", {"packed x1": 0.050, "stock x1": 0.044}, "measured now")
    assert (
        choice.describe()
        == "target linears: stock for 1-3 tokens (stock x1 44.00 ms, packed x1 50.00 ms); measured now"
    )
    assert choice.describe(timings=False) == "target linears: stock for 1-3 tokens; measured now"


def test_a_width_dearer_than_one_row_wider_is_padded():
    assert _padded_rows([0.030, 0.036, 0.029, 0.029, 0.030, 0.034]) == (2,)  # the 2-row kernel of the AVX-512 EPYC
    assert _padded_rows([0.030, 0.031, 0.032, 0.033]) == ()  # a curve that only rises (or within noise): nothing
    assert _padded_rows([0.030, 0.040, 0.041, 0.035]) == (3,)  # compared with the next width, as measured


def test_machine_names_its_isa_and_the_forced_path(cpu_path):
    machine = this_machine()
    assert set(machine.isa) <= set(ISA_FLAGS) and machine.threads == torch.get_num_threads()
    assert machine.avx2_forced == (cpu_path == "avx2")
    capped = machine.kernel_isa == "AVX2" and "avx512f" in machine.isa  # SPECDEC_FORCE_AVX2=1 at start
    assert ("AVX2 path" in machine.kind) == (cpu_path == "avx2" or capped)


def test_target_tuning_measures_the_curve_once_per_machine_and_path(cpu_path, tmp_path, monkeypatch):
    monkeypatch.setenv("SPECDEC_TUNING_DIR", str(tmp_path))
    model = tiny_llama(seed=3)
    first = tune_target(model, "tiny")
    assert len(first.curve.seconds) == tuning.LONGEST_VERIFICATION
    assert first.curve.ratio(1) == 1.0 and first.curve.ratios == sorted(first.curve.ratios)
    kernels = [kernel for kernel in tuning.KERNELS if supports(kernel, torch.float32)]
    assert {PACKED, STOCK} <= set(kernels) and (MKL_PACKED in kernels) == torch.backends.mkl.is_available()
    timed = {f"{kernel} x{width}" for kernel in kernels for width in range(1, tuning.KERNEL_WIDTHS + 1)}
    assert first.kernels.note == "measured now" and set(first.kernels.seconds) == timed
    assert cost_curve(model) is first.curve
    [saved] = list(tmp_path.glob("target-*.json"))
    assert json.loads(saved.read_text())["machine"]["avx2_forced"] == (cpu_path == "avx2")
    again = tune_target(tiny_llama(seed=3), "tiny")
    assert (
        again.kernels.note == "read from the tuning cache" and again.curve == first.curve and again.plan == first.plan
    )
    assert first.curve.long_seconds is None  # its window cannot hold the long context


def test_models_of_one_architecture_share_a_tuning_and_another_shape_is_measured(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECDEC_TUNING_DIR", str(tmp_path))
    first = tune_target(tiny_llama(seed=3), "a hub id")
    other_weights = tune_target(tiny_llama(seed=4), "the embedded model")  # same config, other weights and name
    assert other_weights.kernels.note == "read from the tuning cache" and other_weights.curve == first.curve
    deeper = tune_target(tiny_llama(seed=3, layers=3), "a hub id")
    assert deeper.kernels.note == "measured now" and len(list(tmp_path.glob("target-*.json"))) == 2


def test_a_draft_copy_is_tuned_for_its_kernels_without_a_cost_curve(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECDEC_TUNING_DIR", str(tmp_path))
    model = tiny_llama(seed=3)
    choice = tune_kernels(model, "copy")
    assert cost_curve(model) is None and choice.note == "measured now"
    kernels = [kernel for kernel in tuning.KERNELS if supports(kernel, torch.float32)]
    assert set(choice.seconds) == {f"{k} x{w}" for k in kernels for w in range(1, tuning.KERNEL_WIDTHS + 1)}
    assert not list(tmp_path.glob("target-*.json")) and len(list(tmp_path.glob("kernels-*.json"))) == 1
    again = tune_kernels(tiny_llama(seed=3), "copy")
    assert again.note == "read from the tuning cache" and again.chosen == choice.chosen


def test_target_tuning_measures_behind_a_long_context_where_the_window_holds_one(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECDEC_TUNING_DIR", str(tmp_path))
    model = tiny_llama(seed=3, window=2048)
    curve = tune_target(model, "tiny, long window").curve
    assert len(curve.long_seconds) == tuning.LONGEST_VERIFICATION
    again = tune_target(tiny_llama(seed=3, window=2048), "tiny, long window")
    assert (
        again.kernels.note == "read from the tuning cache" and again.curve == curve
    )  # the long curve survives the file
    for_generate = tune_target(tiny_llama(seed=3, window=2048), "tiny, for generate", served=False)
    assert for_generate.kernels.note == "measured now" and for_generate.curve.long_seconds is None  # never served


def test_choose_fastest_keeps_the_fastest_candidate_and_caches_the_timings(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECDEC_TUNING_DIR", str(tmp_path))
    seconds = {"slow": 0.3, "fast": 0.1, "middle": 0.2}
    built: list[str] = []

    def builder(name):
        return lambda: built.append(name) or name

    chosen, choice = choose_fastest("part", {"id": 1}, {n: builder(n) for n in seconds}, seconds.__getitem__)
    assert chosen == "fast" and choice.seconds == seconds and choice.note == "measured now"
    built.clear()
    chosen, choice = choose_fastest(
        "part", {"id": 1}, {n: builder(n) for n in seconds}, lambda _: pytest.fail("timed again")
    )
    assert chosen == "fast" and built == ["fast"] and choice.note == "read from the tuning cache"


def test_the_one_token_pass_is_timed_settled_and_the_narrow_widths_more_often(monkeypatch):
    """A one-token pass right after a wide one reads dearer on some CPUs (the Intel Xeon with AMX: 10-20%). Here a
    tiny model's pass is made 30 ms dearer in exactly that case: T(1) is timed after an untimed one-token pass, so the
    delay never reaches it, while a wide pass's ratio to its own round's T(1) stays as measured. Widths up to
    KERNEL_WIDTHS get narrow_rounds times the rounds."""
    model = tiny_llama(seed=0)
    real_pass, calls, last = pass_clock.run_pass, [], {"width": 1}

    def pass_after(model, input_ids, cache, **kwargs):
        width = input_ids.shape[1]
        if width == 1 and last["width"] > 1:
            time.sleep(0.03)
        last["width"] = width
        calls.append(width)
        return real_pass(model, input_ids, cache, **kwargs)

    monkeypatch.setattr(pass_clock, "run_pass", pass_after)
    widest = tuning.KERNEL_WIDTHS + 2
    seconds = tuning._time_widths(model, range(1, widest + 1), repeats=2, context_tokens=16, narrow_rounds=3)
    assert seconds[0] < 0.02  # without settling, the median T(1) would carry the 30 ms
    assert calls.count(widest) == 1 + 2 and calls.count(tuning.KERNEL_WIDTHS) == 1 + 2 * 3  # warm-up + rounds
    assert calls.count(1) - 1 == 2 * 2 * 3  # every round: the untimed pass, then the timed one

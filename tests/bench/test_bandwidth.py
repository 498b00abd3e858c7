"""The bandwidth bound's parts on a tiny model: the bytes a step reads, the read bandwidth, the profile by op;
and the --bandwidth report end to end on the embedded model (its figures checked against each other and the
bound, not for speed: timings are noisy)."""

import json
import statistics
import subprocess
import sys

import pytest

from bench.bandwidth import op_profile, read_bandwidth, weight_bytes
from specdec_core.cpu_kernels import release_dense_weights
from tests.conftest import tiny_llama


def test_weight_bytes_counts_a_tied_embedding_once_and_released_weights_at_their_packed_size():
    model = tiny_llama(seed=3)
    model.lm_head.weight = model.model.embed_tokens.weight  # tied, as in SmolLM2
    distinct = {p.data_ptr(): p.numel() * 4 for p in model.parameters()}
    assert weight_bytes(model) == sum(distinct.values())
    before = weight_bytes(model)
    release_dense_weights(model)  # packed linears keep meta weights of the same shape and dtype
    assert any(p.is_meta for p in model.parameters())
    assert weight_bytes(model) == before


def test_read_bandwidth_is_a_plausible_rate():
    rate = read_bandwidth(repeats=2)
    assert 1e8 < rate < 1e13  # bytes per second: between 0.1 GB/s and 10 TB/s


def assert_profile_accounts_for_the_pass(run: dict, top: int) -> None:
    """The parts of a profiled pass: the top ops by self time (positive, in falling order), the other ops and the
    time outside any op sum to the unprofiled wall time; to more only where the profiler's own overhead made the ops
    outlast it, and then nothing is left outside ops. The ops are per pass, not summed over the passes."""
    ops = [op["ms"] for op in run["ops"]]
    assert len(ops) == top and all(ms > 0 for ms in ops) and ops == sorted(ops, reverse=True)
    assert all(op["calls"] >= 1 for op in run["ops"])
    assert run["other_ops_ms"] > 0  # a pass runs more kinds of op than the top ones
    parts = sum(ops) + run["other_ops_ms"] + run["outside_ops_ms"]
    assert parts >= run["wall_ms"] * (1 - 1e-9)
    assert run["outside_ops_ms"] == 0 or parts == pytest.approx(run["wall_ms"])
    assert parts < 3 * run["wall_ms"]  # profiler overhead at most, not every pass's time summed


def test_op_profile_splits_a_pass_into_ops_and_python(target_model):
    run = op_profile(target_model, width=3, passes=5, top=4)
    assert run["width"] == 3 and run["wall_ms"] > 0
    assert_profile_accounts_for_the_pass(run, top=4)
    assert any("linear" in op["op"] or "mm" in op["op"] for op in run["ops"])  # the matrix products are among the top


@pytest.mark.slow
def test_bandwidth_report_end_to_end(tmp_path, embedded):
    cmd = [
        sys.executable,
        "-m",
        "bench",
        "--bandwidth",
        "--repeats",
        "1",
        "--tokens",
        "4",
        "--prompts",
        "1",
        "--out",
        str(tmp_path),
    ]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    report = json.loads(next(tmp_path.glob("bandwidth-*.json")).read_text())
    assert report["identical_to_generate"] is True and report["identical_to_before_lean"] is True
    assert len(report["verify_ratio"]) == len(report["verify_ratio_before_lean"]) == 17
    assert report["verify_ratio"][0] == report["verify_ratio_before_lean"][0] == 1.0  # T(1)/T(1)
    assert 400e6 < report["weight_bytes"] < 700e6  # 135M parameters in float32, the tied embedding once
    # the bound: the weights read once at the median of the bandwidth reads (before, between the repeats, after)
    reads = report["read_bandwidth_gbs"]
    assert len(reads) == 2 and report["bandwidth_gbs"] == pytest.approx(statistics.median(reads))
    bound = report["bound_ms_per_token"]
    assert bound == pytest.approx(1000 * report["weight_bytes"] / (report["bandwidth_gbs"] * 1e9))
    # each pass's share of the bound is the bound over its time per token; above 1 only by timing noise
    for fraction, ms in (
        ("fraction_of_bound", "plain_ms_per_token"),
        ("before_lean_fraction_of_bound", "before_lean_ms_per_token"),
    ):
        assert 0 < report[fraction] < 1.5
        assert report[fraction] == pytest.approx(bound / report[ms])
    assert report["hf_generate_ms_per_token"] > bound / 1.5
    assert [run["width"] for run in report["profile"]] == [1, 5]
    for run in report["profile"]:
        assert_profile_accounts_for_the_pass(run, top=10)
    assert f"{100 * report['fraction_of_bound']:.0f}% of the bound" in result.stdout

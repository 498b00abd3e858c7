"""The bandwidth bound's parts on a tiny model: the bytes a step reads, the read bandwidth, the profile by op;
and the --bandwidth report end to end on the embedded model (its numbers are not asserted: timings are noisy)."""

import json
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


def test_op_profile_splits_a_pass_into_ops_and_python(target_model):
    run = op_profile(target_model, width=3, passes=3, top=4)
    assert run["width"] == 3 and run["wall_ms"] > 0
    assert len(run["ops"]) == 4 and all(op["ms"] >= 0 and op["calls"] >= 1 for op in run["ops"])
    assert [op["ms"] for op in run["ops"]] == sorted((op["ms"] for op in run["ops"]), reverse=True)
    assert any("linear" in op["op"] or "mm" in op["op"] for op in run["ops"])  # the matrix products dominate
    assert run["other_ops_ms"] >= 0 and run["outside_ops_ms"] >= 0


@pytest.mark.slow
def test_bandwidth_report_end_to_end(tmp_path, embedded):
    cmd = [sys.executable, "-m", "bench", "--bandwidth", "--repeats", "1", "--tokens", "4", "--prompts", "1", "--out", str(tmp_path)]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    report = json.loads(next(tmp_path.glob("bandwidth-*.json")).read_text())
    assert report["identical_to_generate"] is True and report["identical_to_before_lean"] is True
    assert len(report["verify_ratio"]) == len(report["verify_ratio_before_lean"]) == 17
    assert 0 < report["fraction_of_bound"] < 1.5  # above 1 only by timing noise: no pass beats the bound
    assert report["weight_bytes"] > 100e6  # 135M parameters in float32, the tied embedding once
    assert [run["width"] for run in report["profile"]] == [1, 5]
    assert "% of the bound" in result.stdout


def test_compiled_greedy_decodes_the_same_tokens_as_plain_decoding():
    from specdec_core.config import GenerationConfig
    from specdec_core.engine import autoregressive
    from specdec_core.stats import generated_tokens

    from bench.compiled import compiled_greedy

    prompt = [3, 1, 4, 1, 5, 9, 2, 6]
    *steps, _ = autoregressive(tiny_llama(seed=5), prompt, GenerationConfig(max_new_tokens=12))
    decode, seconds = compiled_greedy(tiny_llama(seed=5, fast=False), mode=None, cache_length=32)
    assert seconds > 0
    assert decode(prompt, 12) == generated_tokens(steps)
    assert decode(prompt, 12) == generated_tokens(steps)  # the cache is reset between calls
    with pytest.raises(ValueError, match="static cache"):
        decode(prompt, 30)

"""The benchmark runs end to end on the embedded model and writes a complete report (its figures checked for
consistency, not for speed: timings are noisy)."""

import json
import math
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow


def test_bench_writes_a_complete_report(tmp_path, embedded):
    cmd = [sys.executable, "-m", "bench", "--repeats", "1", "--tokens", "6", "--prompts", "1", "--out", str(tmp_path)]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    report = json.loads(next(tmp_path.glob("bench-*.json")).read_text())
    assert [p["workload"] for p in report["prompts"]] == ["structured", "creative"]
    for workload in ("structured", "creative"):
        summary = report["summary"][workload]
        assert summary["all greedy outputs identical"] is True  # ours and transformers', every greedy method
        ratios = [v for v in summary.values() if isinstance(v, float)]
        assert ratios and all(math.isfinite(v) and v > 0 for v in ratios)
    for row in report["prompts"]:
        for method in row["methods"].values():
            assert 1 <= method["tokens"] <= 6
            # one repeat: its rate is its tokens over its seconds
            assert method["tokens_per_second"] * method["median_seconds"] == pytest.approx(method["tokens"])
            assert method["acceptance_rate"] is None or 0 <= method["acceptance_rate"] <= 1
            assert method["mean_accepted_length"] is None or method["mean_accepted_length"] >= 1
    assert "ours plain / hf generate" in report["summary"]["structured"]
    assert "speedup ours ngram adaptive T=1" in report["summary"]["creative"]


def run_bench(*args: str, out) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "bench", *args, "--out", str(out)]
    return subprocess.run(command, capture_output=True, text=True, timeout=600)


def test_suite_reports_each_chosen_method_per_category(tmp_path, embedded):
    result = run_bench(
        "--suite",
        "spec_bench",
        "--per-category",
        "1",
        "--tokens",
        "8",
        "--repeats",
        "1",
        "--ks",
        "3",
        "--methods",
        "head k=3,hybrid k=3,ngram adaptive",
        "--categories",
        "translation,summarization",
        out=tmp_path,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    report = json.loads(next(tmp_path.glob("suite-spec_bench-*.json")).read_text())
    assert list(report["categories"]) == ["translation", "summarization"]
    for category in report["categories"].values():
        assert category["all_identical"] is True and category["head_best_k"] == "head k=3"
        assert set(category["methods"]) == {"head k=3", "hybrid k=3", "ngram adaptive"}
        assert all(m["tokens_per_pass"] >= 1 for m in category["methods"].values())
        assert category["methods"]["head k=3"]["tokens_per_pass"] <= 4  # 3 drafted and 1 from the target at most
        [row] = category["per_prompt"]  # one prompt a category: its own figures are the category's
        for method, figures in category["methods"].items():
            assert row[method] == {"speedup": figures["speedup"], "tokens_per_pass": figures["tokens_per_pass"]}
    assert report["overall"]["head k=3"]["tokens_per_pass_se"] is None  # no spread from one prompt a category


@pytest.mark.slow
def test_server_checks_a_served_model_beside_this_engine(tmp_path, vllm_server):
    result = run_bench(
        "--server", vllm_server.url, "--model", vllm_server.model, "--sets", "spec_bench:qa", "--tokens", "16",
        "--compare", "--lookup", "{prompt_lookup_max},{prompt_lookup_min}".format(**vllm_server.speculation),
        out=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    report = json.loads(next(tmp_path.glob("served-*.json")).read_text())
    assert report["lookup"]["num_speculative_tokens"] == vllm_server.speculation["num_speculative_tokens"]
    [qa] = report["sets"]
    assert qa["workload"] == "spec_bench:qa" and qa["prompts"] == len(report["prompts"]) > 0
    assert 0 <= qa["acceptance_rate"] <= 1 and qa["tokens_per_pass"] >= 1 and qa["tok_s"] > 0
    assert sum(p["accepted"] for p in report["prompts"]) == qa["accepted"]
    k = vllm_server.speculation["num_speculative_tokens"]
    for prompt in report["prompts"]:
        assert isinstance(prompt["identical"], bool) and len(prompt["ours_acceptance_by_position"]) == k


def test_suite_names_a_method_it_does_not_know(tmp_path):
    result = run_bench("--suite", "realistic", "--methods", "hybrid k=3,magic", out=tmp_path)
    assert result.returncode != 0 and "no method named ['magic']" in result.stderr


def test_trees_reports_tokens_per_pass_and_modelled_cost_by_shape(tmp_path, embedded):
    from bench.trees import SHAPES

    categories = ["coding", "translation", "summarization"]  # of 14: a copy-heavy one, a long prompt
    chosen = ",".join(categories)
    result = run_bench("--trees", "--per-category", "1", "--tokens", "8", "--categories", chosen, out=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    report = json.loads(next(tmp_path.glob("trees-*.json")).read_text())
    assert list(report["categories"]) == categories and report["verify_ratio"][0] == 1.0
    # the curve behind a long prompt, where the tree steps of summaries and RAG are sized, is in the report too
    long = report["verify_ratio_long"]
    assert len(long) == 17 and long[0] == 1.0 and long == sorted(long)
    for shapes in report["categories"].values():
        for name, shape in shapes.items():
            depth = SHAPES[name][1]  # a pass accepts at most one token per level and adds the target's own
            assert 1 <= shape["tokens_per_pass"] <= depth + 1 and shape["step_cost"] >= 1
        # a full 24-node tree is verified in a pass at least as wide as a 4-token chain's
        assert shapes["tree 4x5, 24 nodes"]["step_cost"] >= shapes["chain k=3"]["step_cost"] - 1e-9

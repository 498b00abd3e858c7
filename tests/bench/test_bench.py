"""The benchmark runs end to end on the embedded model and writes a complete report (its numbers are not asserted: timings are noisy)."""

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
    assert "ours plain / hf generate" in report["summary"]["structured"]
    assert "speedup ours ngram adaptive T=1" in report["summary"]["creative"]

"""The suite's summaries: per-category spread and the overall standard error (pure functions, no model)."""

import math
import statistics

import pytest

from bench.suite import _category_summary, _overall


def prompt_row(speedup: float, tokens_per_pass: float) -> dict:
    return {
        "head k=3": {
            "speedup": speedup,
            "tokens_per_pass": tokens_per_pass,
            "by_depth": [0.5],
            "c": 0.05,
            "identical": True,
        }
    }


def test_overall_standard_error_weighs_categories_as_equal_strata():
    a = [prompt_row(1.0, t) for t in (1.5, 2.0, 2.5)]
    b = [prompt_row(s, 2.0) for s in (1.2, 1.4)]
    categories = {
        "a": _category_summary(a, ["head k=3"], ["1", "2", "3"]),
        "b": _category_summary(b, ["head k=3"], ["4", "5"]),
    }
    overall = _overall(categories)["head k=3"]
    assert overall["tokens_per_pass"] == pytest.approx((2.0 + 2.0) / 2)
    # category a: sd 0.5 over 3 prompts; b: sd 0 over 2 -> sqrt(0.25 / 3 + 0) / 2
    assert overall["tokens_per_pass_se"] == pytest.approx(math.sqrt(0.25 / 3) / 2)
    assert overall["speedup_se"] == pytest.approx(math.sqrt(statistics.variance([1.2, 1.4]) / 2) / 2)
    assert categories["a"]["per_prompt"][2] == {"id": "3", "head k=3": {"speedup": 1.0, "tokens_per_pass": 2.5}}


def test_a_single_prompt_category_has_no_standard_error():
    categories = {
        "a": _category_summary([prompt_row(1.1, 1.8)], ["head k=3"], ["1"]),
        "b": _category_summary([prompt_row(1.0, 2.0), prompt_row(1.2, 2.2)], ["head k=3"], ["2", "3"]),
    }
    overall = _overall(categories)["head k=3"]
    assert overall["tokens_per_pass_se"] is None and overall["speedup"] == pytest.approx((1.1 + 1.1) / 2)

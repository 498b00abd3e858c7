"""The speculative counters read from Prometheus text as vLLM writes it, and their change over a request."""

import pytest

from specdec_core.served.errors import ServerError
from specdec_core.served.metrics import SpecCounters, counters_in_response, parse_counters

PAGE = """# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 10.0
vllm:spec_decode_num_drafts_created{engine="0",model_name="m"} 1.7e9
# TYPE vllm:spec_decode_num_draft_tokens_total counter
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} 38.0
# TYPE vllm:spec_decode_num_accepted_tokens_total counter
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} 17.0
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="other"} 1000.0
# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="1"} 5.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="0"} 8.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="3"} 1.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="2"} 3.0
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 0.0
"""


def test_counters_are_read_by_family_with_positions_in_order_and_other_models_left_out():
    counts = parse_counters(PAGE, "m")
    assert counts == SpecCounters(drafts=10, draft_tokens=38, accepted=17, accepted_by_position=(8, 5, 3, 1))
    assert counts.acceptance_rate == pytest.approx(17 / 38)
    assert counts.tokens_per_pass == pytest.approx(1 + 17 / 10)
    assert counts.acceptance_by_position == pytest.approx((0.8, 0.5, 0.3, 0.1))


def test_engines_add_up():
    first = 'vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 10.0\n'
    two_engines = PAGE.replace(first, first + 'vllm:spec_decode_num_drafts_total{engine="1",model_name="m"} 5.0\n')
    assert parse_counters(two_engines, "m").drafts == 15


def test_a_page_without_speculative_counters_says_none():
    assert parse_counters("# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 0.0\n", "m") is None
    assert parse_counters(PAGE, "a-model-it-does-not-serve") is None


def test_the_change_over_a_request_and_the_sum_of_changes():
    before = SpecCounters(10, 38, 17, (8, 5, 3, 1))
    after = SpecCounters(14, 54, 29, (12, 8, 6, 3))
    delta = after.minus(before)
    assert delta == SpecCounters(4, 16, 12, (4, 3, 3, 2))
    assert delta.plus(before) == after
    assert after.minus(SpecCounters(0, 0, 0, ())) == after  # positions the first read had not shown yet count from 0


def test_no_drafts_give_no_rates():
    none = SpecCounters(0, 0, 0, (0, 0))
    assert none.acceptance_rate is None and none.tokens_per_pass is None and none.acceptance_by_position == ()


def test_a_page_that_is_not_prometheus_text_is_a_one_line_error():
    with pytest.raises(ServerError, match="not Prometheus text"):
        parse_counters("<html><body>{ not metrics }</body></html>", "m")


def test_a_responses_own_counts_read_its_histogram_as_positions():
    # 5 verifying passes: 1 accepted none, 2 accepted one, 1 accepted two, 1 accepted all three of k = 3
    stats = {
        "mean_acceptance_length": 2.4,
        "draft_acceptance_rate": 7 / 14,
        "acceptance_histogram": [1, 2, 1, 1],
        "num_spec_steps": 5,
        "num_accepted_draft_tokens": 7,
        "num_draft_tokens": 14,
        "num_spec_tokens": 3,
    }
    counts = counters_in_response({"time_to_first_token_ms": 3.0, "speculative_decoding": stats})
    assert counts == SpecCounters(5, 14, 7, (4, 2, 1))
    assert sum(counts.accepted_by_position) == counts.accepted and counts.tokens_per_pass == pytest.approx(2.4)


@pytest.mark.parametrize("metrics", [None, {}, {"speculative_decoding": None}, {"speculative_decoding": {"x": 1}}])
def test_a_response_without_its_counts_gives_none(metrics):
    assert counters_in_response(metrics) is None

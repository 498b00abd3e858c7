"""Against a live vLLM (CPU build) serving the embedded model with n-gram speculation (tests/conftest.py): its
counters, per prompt, hold together; a wrong model name is named; this engine's n-gram drafter beside it."""

import pytest

from specdec_core.prompts import encode_prompt
from specdec_core.served.addresses import server_address
from specdec_core.served.check import ServedPrompt, by_workload, check_prompt
from specdec_core.served.client import ServerClient
from specdec_core.served.compare import Lookup, side_by_side
from specdec_core.served.errors import ServerError

pytestmark = pytest.mark.slow
COPYING = "Repeat this list exactly, twice: red, green, blue, cyan, magenta, yellow."
OPEN = "Name one fruit."
TOKENS = 96  # room for the copying answer to end on its own (finish_reason 'stop')


@pytest.fixture(scope="module")
def server(vllm_server):
    with ServerClient(server_address(vllm_server.url), vllm_server.model, "sk-unused", 120.0) as client:
        yield client


@pytest.fixture(scope="module")
def copying(server):
    return check_prompt(server, ServedPrompt("custom", "copy", COPYING, 0.0), TOKENS, 120.0)


def test_each_prompts_counters_hold_together(copying, vllm_server):
    counts, completion = copying.counts, copying.completion
    k = vllm_server.speculation["num_speculative_tokens"]
    assert counts is not None and counts.drafts > 0  # a copying prompt gets drafts
    assert 0 < counts.accepted <= counts.draft_tokens <= k * counts.drafts
    assert len(counts.accepted_by_position) == k
    assert list(counts.accepted_by_position) == sorted(counts.accepted_by_position, reverse=True)
    assert sum(counts.accepted_by_position) == counts.accepted
    # every token after the first comes from a decode pass: a verifying one (accepted + 1) or a plain one (1)
    assert counts.accepted + counts.drafts <= completion.completion_tokens - 1
    assert counts.tokens_per_pass == pytest.approx(1 + counts.accepted / counts.drafts)
    # the request's own counts in its response (the fixture asks for them) equal the counters' change over it
    assert copying.counted_by == "response" and completion.counts == copying.metrics_counts


def test_completion_tokens_match_the_streamed_text(copying, embedded):
    completion = copying.completion
    assert completion.completion_tokens == len(completion.token_ids) > 0
    assert embedded.tokenizer.decode(completion.token_ids, skip_special_tokens=True) == completion.text
    assert 0 < completion.first_token_seconds < completion.seconds and completion.tokens_per_second > 0


def test_counters_of_prompts_in_turn_add_up_to_the_servers(server):
    before = server.counters()
    prompts = [ServedPrompt("custom", name, text, 0.0) for name, text in (("copy", COPYING), ("open", OPEN))]
    results = [check_prompt(server, prompt, 16, 120.0) for prompt in prompts]
    (whole,) = by_workload(results)
    assert whole.counts == server.counters().minus(before)
    assert whole.prompts == 2 and whole.speedup is None and "no baseline" in whole.verdict


def test_a_wrong_model_name_names_the_model_served(vllm_server):
    with ServerClient(server_address(vllm_server.url), "gpt-7", "", 60.0) as wrong, pytest.raises(ServerError) as e:
        wrong.complete(OPEN, 8, 0.0, 60.0)
    assert str(e.value) == f"The server has no model named 'gpt-7'; it serves: '{vllm_server.model}'."


def test_this_engines_ngram_drafter_beside_the_server(copying, embedded, vllm_server):
    """Both greedy on the same weights, drafting by the same rule: where the outputs agree and the answer ended on
    its own, so do the counts, draft for draft (at a token budget's end vLLM still drafts k, this engine no more
    than the budget leaves, so there they may differ in the last draft). Up to where outputs part, the server's
    tokens are this engine's argmax, so at the parting ours is at least as likely as the server's under this
    engine's target (a near-tie where close)."""
    assert copying.completion.prompt_token_ids == tuple(encode_prompt(embedded.tokenizer, COPYING))  # one template
    lookup = Lookup(**{key: value for key, value in vllm_server.speculation.items() if key != "method"})
    side = side_by_side(embedded, COPYING, copying.completion.token_ids, lookup, TOKENS)
    assert len(side.ours.accepted_by_position) == lookup.num_speculative_tokens
    assert 0 < side.ours.accepted <= side.ours.draft_tokens
    assert copying.completion.finish_reason == "stop"
    if side.identical:
        assert side.ours == copying.counts
    else:
        assert side.our_tokens[: side.parting.position] == side.server_tokens[: side.parting.position]
        if side.parting.server_token is not None and side.parting.our_token is not None:
            assert side.parting.our_token_prob >= side.parting.server_token_prob
    print(
        f"\nserver: {copying.counts.tokens_per_pass:.2f} tokens/pass, acceptance {copying.counts.acceptance_rate:.2f}, "
        f"by position {copying.counts.acceptance_by_position}; this engine: {side.ours.tokens_per_pass:.2f}, "
        f"{side.ours.acceptance_rate:.2f}, {side.ours.acceptance_by_position}; identical {side.identical}"
    )

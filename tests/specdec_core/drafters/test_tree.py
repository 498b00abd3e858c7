"""Draft trees: the geometry, the multi-candidate rule, KV compaction, and losslessness of tree and hybrid drafting."""

import pytest
import torch
from transformers import DynamicCache

import specdec_core.engine as engine
from specdec_core import (
    DraftConfig,
    GenerationConfig,
    SamplingConfig,
    SpecStep,
    autoregressive,
    generated_tokens,
    speculative,
)
from specdec_core.acceptance import Verdict, verify
from specdec_core.config import MAX_DRAFT_TOKENS
from specdec_core.costs import CostCurve
from specdec_core.drafters.base import Draft
from specdec_core.drafters.eagle import EagleDrafter, TreeShape
from specdec_core.drafters.hybrid import HybridDrafter
from specdec_core.events import HEAD, LOOKUP, LOOKUP_AND_HEAD, RATIO, PlainStep
from specdec_core.kv_cache import CachedModel
from specdec_core.sampling import Sampler
from specdec_core.tree import SideBranch, attention_mask, chain, choose_size, depths, positions
from tests.conftest import tiny_llama
from tests.specdec_core.conftest import PROMPT, assert_matches
from tests.specdec_core.drafters.conftest import SAMPLING, SMALL_VOCAB, VOCAB, random_head

#        root
#       /    \
#      0      1
#     / \     |
#    2   3    4
TREE = (-1, -1, 0, 0, 1)
GREEDY = Sampler(SamplingConfig())


def test_depths_and_chain():
    assert depths(TREE) == [1, 1, 2, 2, 2]
    assert chain(3) == (-1, 0, 1) and depths(chain(3)) == [1, 2, 3]


def test_tree_mask_and_positions_for_a_known_tree():
    mask = attention_mask(TREE, tail=2, cached=3)[0, 0].int().tolist()
    #            cache    tail   nodes 0 1 2 3 4
    assert mask == [
        [1, 1, 1, 1, 0, 0, 0, 0, 0, 0],  # tail token 1
        [1, 1, 1, 1, 1, 0, 0, 0, 0, 0],  # tail token 2 (the root)
        [1, 1, 1, 1, 1, 1, 0, 0, 0, 0],  # node 0 sees itself
        [1, 1, 1, 1, 1, 0, 1, 0, 0, 0],  # node 1: not its sibling
        [1, 1, 1, 1, 1, 1, 0, 1, 0, 0],  # node 2: its parent 0
        [1, 1, 1, 1, 1, 1, 0, 0, 1, 0],  # node 3: its parent 0, not its sibling 2
        [1, 1, 1, 1, 1, 0, 1, 0, 0, 1],  # node 4: its parent 1
    ]
    assert positions(TREE, tail=2, cached=3).tolist() == [[3, 4, 5, 5, 6, 6, 6]]


def table(*rows):
    return torch.tensor(rows, dtype=torch.float32)


def test_greedy_walks_down_the_sibling_the_target_prefers():
    # target argmax: root -> 1, then at node 1 -> 3 (node 4 has token 3), then at node 4 -> 0 (bonus)
    target = table([0, 0.9, 0.1, 0], [0.9, 0, 0, 0.1], [0.1, 0.2, 0, 0.7], [0, 0, 0, 0], [0, 0, 0, 0], [0.8, 0.2, 0, 0])
    tokens = torch.tensor([2, 1, 0, 1, 3])  # node 0 = 2, node 1 = 1, its child node 4 = 3
    verdict = verify(tokens, None, target, GREEDY, TREE)
    assert verdict.path == (1, 4) and verdict.next_token == 0  # the second sibling, then a bonus after the leaf
    assert verdict.accept_probs == (
        0.0,
        1.0,
        1.0,
        0.0,
        1.0,
    )  # per node, at its parent: node 2 agrees but is off the path


def test_sampling_tries_the_next_sibling_on_the_residual():
    # root: p = (0, .5, .5); the first sibling guesses 0 (p = 0: always refused), the second guesses 1.
    target = table([0, 0.5, 0.5], [1, 0, 0], [1, 0, 0])
    accepted_second = 0
    for seed in range(400):
        verdict = verify(
            torch.tensor([0, 1]), None, target, Sampler(SamplingConfig(temperature=1.0, seed=seed)), (-1, -1)
        )
        assert verdict.path in ((), (1,))
        assert verdict.next_token in (2, 0)  # the residual after both: token 2; after node 1 (a leaf): the bonus
        accepted_second += verdict.path == (1,)
    assert 160 < accepted_second < 240  # p(1) = 0.5 once token 0 is struck out


def test_choose_size_keeps_nodes_while_they_pay_for_a_wider_pass():
    scores = [0.9, 0.6, 0.3, 0.1, 0.05]
    flat = CostCurve((0.05,) * 17)
    steep = CostCurve(tuple(0.05 * (1 + 0.5 * n) for n in range(17)))
    assert choose_size(scores, flat.step_costs(100, 0.1), 1, 16) == 5  # free width: every node
    assert choose_size(scores, steep.step_costs(100, 0.1), 1, 16) < 5
    assert choose_size(scores, None, 1, 3) == 3
    # Drafting already paid for makes a wider pass relatively cheaper: never fewer nodes with more passes spent.
    assert choose_size(scores, steep.step_costs(100, 0.1), 6, 16) >= choose_size(
        scores, steep.step_costs(100, 0.1), 1, 16
    )


def test_a_tree_is_sized_with_the_nodes_verified_beside_it():
    """A pass as dear for 1-8 tokens, three times dearer from 9 (the Xeon's step at 9, made stark): alone a tree
    fills the 8 tokens (7 nodes and the fed token); beside a 3-token lookup guess in the same pass it keeps 4 nodes."""
    scores = [0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.25, 0.2, 0.15]
    stepped = CostCurve((0.05,) * 8 + (0.15,) * 9).step_costs(100, 0.0)
    assert choose_size(scores, stepped, 3, 16) == 7
    assert choose_size(scores, stepped, 3, 16, SideBranch(nodes=3, expected_tokens=0.5)) == 4
    # What the nodes beside it give counts toward the step: the surer the guess, the more the step already yields per
    # unit of cost, and the fewer of the head's nodes pay for their share of a wider pass.
    steep = CostCurve(tuple(0.05 * (1 + 0.3 * n) for n in range(17))).step_costs(100, 0.1)
    sizes = [choose_size(scores, steep, 3, 16, SideBranch(3, expected)) for expected in (0.0, 1.0, 2.5)]
    assert sizes == sorted(sizes, reverse=True) and sizes[-1] < sizes[0]


# ---- KV compaction ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def target():
    return tiny_llama(seed=1, vocab_size=VOCAB)


def test_cache_after_a_tree_step_equals_a_fresh_cache_over_the_kept_tokens(target):
    context = [3, 7, 1, 4, 9]
    nodes = [5, 6, 8, 2, 11]
    model = CachedModel(target)
    model.forward(context[:3])
    model.forward(context[3:] + nodes, logits_to_keep=len(nodes) + 1, parents=TREE)
    path = [1, 4]  # nodes 1 and 4: tokens 6, 11
    model.compact(3, [0, 1] + [2 + node for node in path])
    fresh = DynamicCache(config=target.config)
    with torch.no_grad():
        target(input_ids=torch.tensor([context + [6, 11]]), cache=fresh, use_cache=True)
    assert model.length == len(context) + len(path)
    for kept, reference in zip(model.cache.layers, fresh.layers):
        torch.testing.assert_close(kept.keys, reference.keys, atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(kept.values, reference.values, atol=1e-5, rtol=1e-4)


# ---- losslessness ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def head(target):
    return random_head(target, list(range(VOCAB)), seed=3, sharpness=4.0)


@pytest.mark.parametrize(
    "shape", [TreeShape(width=2, max_nodes=4), TreeShape(width=3, max_nodes=8), TreeShape(width=4, max_nodes=16)]
)
@pytest.mark.parametrize("k,adaptive", [(2, False), (4, False), (3, True)])
def test_greedy_tree_drafting_equals_plain_decoding_and_generate(target, head, shape, k, adaptive):
    config = GenerationConfig(max_new_tokens=40)
    plain = generated_tokens(autoregressive(target, PROMPT, config))
    reference = target.generate(
        torch.tensor([PROMPT]), max_new_tokens=40, min_new_tokens=40, do_sample=False, pad_token_id=0
    )
    assert plain == reference[0, len(PROMPT) :].tolist()
    events = list(
        speculative(target, EagleDrafter(head, tree=shape), PROMPT, config, DraftConfig(k=k, adaptive=adaptive))
    )
    assert generated_tokens(events) == plain
    trees = [e for e in events if isinstance(e, SpecStep) and not e.is_chain]
    assert trees and max(e.drafted_count for e in trees) <= shape.max_nodes
    assert any(e.path and e.path != tuple(range(len(e.path))) for e in trees)  # a path that is not the first branch


def test_a_tree_sized_by_a_steep_cost_curve_is_smaller(target, head):
    config = GenerationConfig(max_new_tokens=24)
    sizes = {}
    for name, curve in {
        "flat": CostCurve((0.01,) * 17),
        "steep": CostCurve(tuple(0.01 * (1 + n) for n in range(17))),
    }.items():
        drafter = EagleDrafter(head, tree=TreeShape(width=3, max_nodes=16), curve=curve, c=0.05)
        steps = [e for e in speculative(target, drafter, PROMPT, config, DraftConfig(k=3)) if isinstance(e, SpecStep)]
        sizes[name] = sum(s.drafted_count for s in steps) / len(steps)
    assert sizes["steep"] < sizes["flat"]


def test_a_tree_behind_a_long_context_is_sized_by_the_curve_measured_there(target, head):
    """Flat behind a short context, steep behind a long one (attention reads the whole context per node)."""
    flat = (0.01,) * 17
    curve = CostCurve(flat, tuple(0.01 * (1 + 10 * n) for n in range(17)))
    long_prompt = [(7 * i) % VOCAB for i in range(200)]  # past the short curve's 160 tokens, inside the window of 256
    sizes = {}
    for name, prompt, costs in (
        ("short", PROMPT, curve),
        ("long", long_prompt, curve),
        ("long, flat", long_prompt, CostCurve(flat)),
    ):
        drafter = EagleDrafter(head, tree=TreeShape(width=3, max_nodes=16), curve=costs, c=0.05)
        steps = [
            e
            for e in speculative(target, drafter, prompt, GenerationConfig(max_new_tokens=24), DraftConfig(k=3))
            if isinstance(e, SpecStep)
        ]
        sizes[name] = sum(s.drafted_count for s in steps) / len(steps)
    assert sizes["long"] < sizes["long, flat"] and sizes["long"] < sizes["short"]


@pytest.fixture(scope="module")
def fused_head(target):
    """EAGLE-3's layout: both layers of the 2-layer target, fused."""
    return random_head(target, list(range(VOCAB)), seed=3, sharpness=4.0, layers=(0, 1))


@pytest.fixture(scope="module")
def deep_head(target):
    """Two decoder layers of its own: a tree level runs both over the level's nodes."""
    return random_head(target, list(range(VOCAB)), seed=3, sharpness=4.0, draft_layers=2)


@pytest.mark.parametrize("heads", ["fused_head", "deep_head"])
@pytest.mark.parametrize("k", [2, 4])
def test_greedy_tree_of_a_fused_or_deeper_head_equals_plain_decoding(target, heads, k, request):
    config = GenerationConfig(max_new_tokens=40)
    plain = generated_tokens(autoregressive(target, PROMPT, config))
    drafter = EagleDrafter(request.getfixturevalue(heads), tree=TreeShape(width=3, max_nodes=8))
    events = list(speculative(target, drafter, PROMPT, config, DraftConfig(k=k)))
    assert generated_tokens(events) == plain
    assert any(isinstance(e, SpecStep) and not e.is_chain for e in events)


@pytest.mark.parametrize("heads", ["head", "fused_head", "deep_head"])
@pytest.mark.parametrize("adaptive", [False, True])
def test_greedy_hybrid_equals_plain_and_keeps_the_lookup_branch(target, heads, adaptive, request):
    head = request.getfixturevalue(heads)
    prompt = PROMPT * 3  # repetitive: the lookup has something to offer
    config = GenerationConfig(max_new_tokens=40)
    plain = generated_tokens(autoregressive(target, prompt, config))
    # with a cost curve, as the app makes it: it then gates its head itself, and an adaptive k never turns its free
    # lookup off (a flat one: on the tiny target the head costs about a target pass, and a probe that much)
    drafter = HybridDrafter(EagleDrafter(head, tree=TreeShape(width=2, max_nodes=8)), curve=CostCurve((0.01,) * 17))
    events = list(speculative(target, drafter, prompt, config, DraftConfig(k=4, adaptive=adaptive)))
    assert generated_tokens(events) == plain
    steps = [e for e in events if isinstance(e, SpecStep) and e.drafted_count]
    assert all(sorted(e.parents[: e.parents.count(-1)]) == [-1] * e.parents.count(-1) for e in steps)  # roots first
    for step in steps:  # the lookup's guess is one branch from the root; the head's nodes carry its q, lookup's none
        from_lookup = [n for n, source in enumerate(step.sources) if source in (LOOKUP, LOOKUP_AND_HEAD)]
        assert all(step.parents[n] == (from_lookup[i - 1] if i else -1) for i, n in enumerate(from_lookup))
        q = step.draft_probs or (float("nan"),) * step.drafted_count  # a lookup-only draft carries no q
        assert all((q[n] != q[n]) == (source == LOOKUP) for n, source in enumerate(step.sources))
    assert {LOOKUP, HEAD} <= {source for step in steps for source in step.sources}


def test_hybrid_drafts_the_lookup_alone_and_longer_while_the_text_copies(target, head):
    # The tiny random target soon repeats itself: its own output is the span the lookup copies.
    prompt = [3, 8, 1] + PROMPT
    config = GenerationConfig(max_new_tokens=48)
    plain = generated_tokens(autoregressive(target, prompt, config))
    assert len(set(plain[-30:])) <= 2, "the target must repeat itself here for this test to mean anything"
    flat = CostCurve((0.01,) * 17)  # a wide pass costs what a narrow one does: long guesses pay when they are right
    drafter = HybridDrafter(EagleDrafter(head, tree=TreeShape(width=2, max_nodes=8)), curve=flat)
    events = list(speculative(target, drafter, prompt, config, DraftConfig(k=2)))
    assert generated_tokens(events) == plain
    steps = [e for e in events if isinstance(e, SpecStep)]
    copies = [s for s in steps if s.draft_passes == 0 and s.drafted_count]
    assert copies and max(s.drafted_count for s in copies) > 2  # longer than k, the head not run
    assert all(s.is_chain for s in copies)
    assert any(s.draft_passes for s in steps)  # the head ran before the copy was found


def test_hybrid_sizes_the_heads_tree_beside_its_lookup_guess(target, head):
    """Each head tree is sized with the step's lookup guess in its pass, and what the guess is expected to give."""
    prompt = PROMPT * 3  # repetitive: the lookup has something to offer
    drafter = HybridDrafter(EagleDrafter(head, tree=TreeShape(width=2, max_nodes=8)), curve=CostCurve((0.01,) * 17))
    asked, propose = [], drafter.head.propose
    drafter.head.propose = lambda context, k, sampler, side: (
        asked.append((side, len(drafter._guess))) or propose(context, k, sampler, side)
    )
    config = GenerationConfig(max_new_tokens=40)
    events = list(speculative(target, drafter, prompt, config, DraftConfig(k=3)))
    assert generated_tokens(events) == generated_tokens(autoregressive(target, prompt, config))
    assert asked and all(side.nodes == guess for side, guess in asked)
    assert any(side.nodes for side, _ in asked)  # the lookup had a guess beside the head
    assert all(0.0 <= side.expected_tokens <= side.nodes for side, _ in asked)


def test_hybrid_sizes_a_guess_by_what_guesses_after_matches_as_long_kept(head):
    """A guess continuing the last 3 tokens is sized by what such guesses kept in this run, not by what guesses
    after 1-token matches kept; a match length with no guess judged yet gets k."""
    curve = CostCurve(tuple(0.01 * (1 + 0.04 * n) for n in range(17)))  # each token in the pass costs 4% more
    drafter = HybridDrafter(EagleDrafter(head, tree=TreeShape(width=2, max_nodes=8)), curve=curve)
    drafter._judged[3], drafter._agreed[3] = 10.0, 9.5
    drafter._judged[1], drafter._agreed[1] = 10.0, 2.0
    assert drafter._length(2, curve, 3) > drafter._length(2, curve, 1) == 2
    assert drafter._length(2, curve, 2) == 2


def test_hybrid_takes_a_k_past_its_longest_lookup(target, head):
    """DraftConfig allows k up to MAX_DRAFT_TOKENS, past the lookup's longest (its length was chosen from an empty
    range there, and raised); the merged tree, wider than any measured pass, is priced along the curve's last step."""
    prompt = [3, 8, 1] + PROMPT
    config = GenerationConfig(max_new_tokens=48)
    k = HybridDrafter.LONGEST_LOOKUP + 4
    assert k <= MAX_DRAFT_TOKENS
    drafter = HybridDrafter(EagleDrafter(head, tree=TreeShape(width=2, max_nodes=8)), curve=CostCurve((0.01,) * 17))
    events = list(speculative(target, drafter, prompt, config, DraftConfig(k=k)))
    assert generated_tokens(events) == generated_tokens(autoregressive(target, prompt, config))
    assert any(
        e.drafted_count > 2 and not e.draft_passes for e in events if isinstance(e, SpecStep)
    )  # the lookup's guesses ran


def test_hybrid_rests_a_head_whose_passes_cost_more_than_they_give(target, head):
    # Sampled: the tiny target's text does not fall into a loop for the lookup to copy.
    config = GenerationConfig(max_new_tokens=80, sampling=SamplingConfig(temperature=1.0, seed=4))
    flat = CostCurve((0.01,) * 17)
    ran = {}
    for c in (0.0, 2.0):  # free head passes, or each as dear as two target passes
        drafter = HybridDrafter(EagleDrafter(head, tree=TreeShape(width=2, max_nodes=8)), curve=flat, c=c)
        events = list(speculative(target, drafter, PROMPT, config, DraftConfig(k=2)))
        ran[c] = "".join("h" if e.draft_passes else "." for e in events if isinstance(e, SpecStep))
    assert ran[0.0].count("h") > ran[2.0].count("h")
    rests = ran[2.0].split("h")[1:-1]  # the runs of steps without the head between two with it
    assert rests and max(map(len, rests)) == HybridDrafter.PROBE_EVERY, ran  # tried again after PROBE_EVERY steps


def test_a_draft_deeper_than_the_budget_is_cut_to_it(target, head):
    # The target copies itself here and a flat curve lets the lookup guess far deeper than k = 1.
    prompt = [3, 8, 1] + PROMPT
    cut = False
    for budget in (21, 24, 27, 30):
        drafter = HybridDrafter(EagleDrafter(head, tree=TreeShape(width=2, max_nodes=8)), curve=CostCurve((0.01,) * 17))
        events = list(speculative(target, drafter, prompt, GenerationConfig(max_new_tokens=budget), DraftConfig(k=1)))
        assert len(generated_tokens(events)) == budget
        generated = 1  # the prefill step's token
        for step in (e for e in events if isinstance(e, SpecStep)):
            deepest = max(depths(step.parents), default=0)
            assert deepest <= budget - generated - 1
            cut |= deepest == budget - generated - 1 > 1  # the bound itself reached, deeper than k
            generated += len(step.emitted_tokens)
    assert cut


def test_within_keeps_the_shallow_nodes_with_their_rows():
    probs = torch.eye(5)
    draft = Draft((10, 11, 12, 13, 14), TREE, probs, torch.arange(5.0), passes=2, seconds=0.0, sources=(HEAD,) * 5)
    assert draft.truncated(2) is draft
    cut = draft.truncated(1)
    assert cut.tokens == (10, 11) and cut.parents == (-1, -1)
    assert cut.probs.tolist() == probs[:2].tolist() and cut.confidence.tolist() == [0.0, 1.0]
    assert draft.truncated(0).tokens == ()


# ---- sampling: siblings, a reduced draft vocabulary, the bonus token ----------------------------------


@pytest.fixture(scope="module")
def small_target():
    return tiny_llama(seed=11, vocab_size=SMALL_VOCAB)


@pytest.fixture(scope="module")
def small_head(small_target):
    return random_head(small_target, [0, 1, 2, 3, 4], seed=5, sharpness=6.0)  # q = 0 for tokens 5, 6, 7


def exact_marginals(target, prompt: list[int], sampling: SamplingConfig, length: int) -> list[torch.Tensor]:
    """p(x_i) for i = 1..length, summing over every earlier path (SMALL_VOCAB ** (length - 1) passes)."""
    sampler = Sampler(sampling)
    marginals = [torch.zeros(SMALL_VOCAB) for _ in range(length)]

    def walk(prefix: list[int], weight: float, depth: int) -> None:
        with torch.no_grad():
            row = sampler.probs(target(torch.tensor([prompt + prefix])).logits[0, -1:])[0]
        marginals[depth] += weight * row
        if depth + 1 < length:
            for token in range(SMALL_VOCAB):
                if row[token] > 0:
                    walk(prefix + [token], weight * float(row[token]), depth + 1)

    walk([], 1.0, 0)
    return marginals


def tree_sample_counts(target, head, runs: int) -> list[list[int]]:
    counts = [[0] * SMALL_VOCAB for _ in range(3)]
    for seed in range(runs):
        sampling = SamplingConfig(
            temperature=SAMPLING.temperature, top_p=SAMPLING.top_p, top_k=SAMPLING.top_k, seed=seed
        )
        drafter = EagleDrafter(head, tree=TreeShape(width=3, max_nodes=6))
        tokens = generated_tokens(
            speculative(
                target, drafter, [1, 2, 3], GenerationConfig(max_new_tokens=4, sampling=sampling), DraftConfig(k=2)
            )
        )
        for i in range(3):
            counts[i][tokens[i + 1]] += 1  # tokens 2-4: the tree step (token 1 comes from the prefill)
    return counts


def test_tree_sampling_matches_the_target_distribution(small_target, small_head):
    marginals = exact_marginals(small_target, [1, 2, 3], SAMPLING, 4)[1:]
    assert marginals[0][5:].sum() > 0.05, "the target must put mass on tokens the head cannot propose"
    counts = tree_sample_counts(small_target, small_head, runs=1500)
    assert sum(counts[0][5:]) > 0
    for observed, expected in zip(counts, marginals):
        assert assert_matches(observed, expected) > 1e-3


def test_tree_distribution_test_catches_a_broken_rule(small_target, small_head, monkeypatch):
    """Accepting the first sibling whenever p(x) > 0 (no rejection sampling): the same test fails."""

    def first_child_if_possible(tokens, draft_probs, target_probs, sampler, parents=None, confidence=None):
        path, node = [], -1
        while True:
            row = target_probs[node + 1]
            kids = [n for n, p in enumerate(parents) if p == node]
            if not kids or row[int(tokens[kids[0]])] == 0:
                n = len(tokens)
                return Verdict(tuple(path), sampler.pick(row), (1.0,) * n, (1.0,) * n, (1.0,) * n, 1.0, RATIO, ())
            path.append(kids[0])
            node = kids[0]

    monkeypatch.setattr(engine, "verify", first_child_if_possible)
    marginals = exact_marginals(small_target, [1, 2, 3], SAMPLING, 4)[1:]
    counts = tree_sample_counts(small_target, small_head, runs=1500)
    assert min(assert_matches(o, e) for o, e in zip(counts, marginals)) < 1e-6


def test_an_adaptive_k_never_stops_the_hybrid_consulting_its_lookup(target, head):
    # Sampled text, which the random head rarely predicts: an adaptive k fed its low acceptance would turn
    # drafting off (plain steps). With a curve and head passes as dear as two target passes, the hybrid
    # rests its head itself (its ledger) and keeps drafting with the lookup.
    config = GenerationConfig(max_new_tokens=60, sampling=SamplingConfig(temperature=1.0, seed=4))
    drafter = HybridDrafter(
        EagleDrafter(head, tree=TreeShape(width=2, max_nodes=8)), curve=CostCurve((0.01,) * 17), c=2.0
    )
    events = list(speculative(target, drafter, PROMPT, config, DraftConfig(k=3, adaptive=True)))
    steps = [e for e in events if isinstance(e, (SpecStep, PlainStep))][1:]  # after the prefill step
    assert all(isinstance(e, SpecStep) for e in steps[:-1])  # the last may be plain: one token of budget left
    assert any(e.draft_passes == 0 and e.drafted_count for e in steps)  # the lookup alone, the head rested

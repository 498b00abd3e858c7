"""The EAGLE head drafter on tiny random models: losslessness, rollback, the id map, its files."""

import copy
import json

import pytest
import torch

import specdec_core.engine as engine
import specdec_core.kv_cache as kv_cache
from specdec_core import (
    DraftConfig,
    GenerationConfig,
    SamplingConfig,
    SpecStep,
    autoregressive,
    generated_tokens,
    speculative,
)
from specdec_core.acceptance import Verdict
from specdec_core.cpu_kernels import PACKED
from specdec_core.drafters.eagle import EagleDrafter, TreeShape
from specdec_core.drafters.eagle_head import load_head, save_head
from specdec_core.drafters.head_variants import HEAD_VARIANTS, fast_head, head_variant, head_variants
from specdec_core.errors import ModelLoadError
from specdec_core.events import RATIO
from specdec_core.kv_cache import CachedModel
from specdec_core.sampling import Sampler
from specdec_core.tree import additive_mask, causal_mask
from specdec_core.tuning import draft_pass
from tests.conftest import tiny_llama
from tests.specdec_core.conftest import PROMPT, assert_matches, exact_marginals
from tests.specdec_core.drafters.conftest import SAMPLING, SMALL_VOCAB, VOCAB, random_head


@pytest.fixture(scope="module")
def target():
    return tiny_llama(seed=1, vocab_size=VOCAB)


# A reduced draft vocabulary: 24 of the target's 32 ids, so some tokens are never proposed.
DRAFT_IDS = list(range(0, VOCAB, 4)) + [i for i in range(VOCAB) if i % 4][:16]


@pytest.fixture(scope="module")
def head(target):
    return random_head(target, DRAFT_IDS)


@pytest.fixture(scope="module")
def fused_head(target):
    """EAGLE-3's layout on the 2-layer target: both layers' outputs, fused."""
    return random_head(target, DRAFT_IDS, layers=(0, 1))


@pytest.fixture(scope="module")
def deep_head(target):
    """Two decoder layers of its own, each with its entries in the head's cache."""
    return random_head(target, DRAFT_IDS, draft_layers=2)


@pytest.fixture(scope="module")
def stacked_head(deep_head):
    """The two-layer head as served: each layer's projections stacked, run by the lean layer."""
    return copy.deepcopy(deep_head).stack_projections()


@pytest.fixture(params=["head", "fused_head", "deep_head", "stacked_head"])
def any_head(request):
    return request.getfixturevalue(request.param)


@pytest.mark.parametrize("name", ["head", "fused_head", "deep_head"])
def test_stacked_projections_compute_what_the_layers_do(request, name):
    """A served head (EagleHead.stack_projections: lean_pass's fusion and layer) against the same head through
    transformers' layers: the same outputs and cache entries for a causal prefill, then for a masked tree level."""
    head = request.getfixturevalue(name)
    stacked = copy.deepcopy(head).stack_projections()
    assert stacked.projections_stacked and not head.projections_stacked
    torch.manual_seed(0)
    features, tokens = torch.randn(1, 6, head.config.hidden_size), torch.randint(VOCAB, (1, 6))
    tree_mask = additive_mask(
        torch.tensor(
            [
                [True] * 6 + [True, False, False],
                [True] * 6 + [False, True, False],
                [True] * 5 + [False, True, False, True],
            ]
        ),
        torch.float32,
    )
    caches = [head.new_cache(), stacked.new_cache()]
    with torch.inference_mode():
        for part in ((slice(0, 6), torch.arange(6)[None], None), (slice(3, 6), torch.tensor([[6, 6, 7]]), tree_mask)):
            rows, positions, mask = part
            expected, got = (
                h(features[:, rows], tokens[:, rows], positions, cache, mask)
                for h, cache in zip((head, stacked), caches)
            )
            torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    for index in range(head.config.draft_layers):
        torch.testing.assert_close(caches[1].layers[index].keys, caches[0].layers[index].keys, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(caches[1].layers[index].values, caches[0].layers[index].values, rtol=1e-5, atol=1e-5)


def test_a_stacked_head_is_not_saved(stacked_head, tmp_path):
    with pytest.raises(ValueError, match="stacked for serving"):
        save_head(stacked_head, tmp_path / "head")
    assert not (tmp_path / "head").exists()


@pytest.mark.parametrize("k", range(1, 9))
@pytest.mark.parametrize("adaptive", [False, True])
def test_greedy_head_drafts_equal_plain_and_generate(target, any_head, k, adaptive):
    head = any_head
    config = GenerationConfig(max_new_tokens=40)
    plain = generated_tokens(autoregressive(target, PROMPT, config))
    reference = target.generate(
        torch.tensor([PROMPT]), max_new_tokens=40, min_new_tokens=40, do_sample=False, pad_token_id=0
    )
    assert plain == reference[0, len(PROMPT) :].tolist()
    events = list(speculative(target, EagleDrafter(head), PROMPT, config, DraftConfig(k=k, adaptive=adaptive)))
    assert generated_tokens(events) == plain


def test_the_feature_buffer_grows_without_changing_a_draft(target, head, monkeypatch):
    """The drafter keeps the target's features in a buffer with room to spare (kv_cache.with_room): started at
    8 rows, it grows over a 40-token run, and the drafts stay those of plain decoding."""
    monkeypatch.setattr(kv_cache, "MIN_ROOM", 8)
    config = GenerationConfig(max_new_tokens=40)
    drafter = EagleDrafter(head)
    assert len(drafter._features) == 8
    events = list(speculative(target, drafter, PROMPT, config, DraftConfig(k=3)))
    assert generated_tokens(events) == generated_tokens(autoregressive(target, PROMPT, config))
    assert len(drafter._features) >= len(PROMPT) + 40 - 2


@pytest.mark.parametrize("name", ["head", "fused_head", "deep_head"])
def test_every_head_variant_stays_lossless(request, target, name, tmp_path, cpu_path):
    """Each precision and kernel the tuner may pick on this path, projections stacked as served: greedy output
    identical to plain decoding."""
    head = request.getfixturevalue(name)
    save_head(head, tmp_path / "head")
    config = GenerationConfig(max_new_tokens=40)
    plain = generated_tokens(autoregressive(target, PROMPT, config))
    assert len(head_variants()) == len(HEAD_VARIANTS) - (
        cpu_path == "avx2" or not torch.ops.mkldnn._is_mkldnn_bf16_supported()
    )
    for variant in head_variants():
        fast = head_variant(tmp_path / "head", target, variant)
        dtype, kernel = HEAD_VARIANTS[variant]
        assert fast.feature_scale.dtype == dtype and fast.projections_stacked
        if kernel == PACKED:
            assert fast.draft_lm_head[0].weight.is_meta and fast.fc.weight.is_meta  # only packed copies kept
        events = list(speculative(target, EagleDrafter(fast), PROMPT, config, DraftConfig(k=4)))
        assert generated_tokens(events) == plain, variant
        assert events[-1].summary.drafted > 0


def test_the_tuned_head_is_the_fastest_variant_and_its_cost_is_recorded(target, head, tmp_path, monkeypatch, cpu_path):
    monkeypatch.setenv("SPECDEC_TUNING_DIR", str(tmp_path / "tuning"))
    save_head(head, tmp_path / "head")
    fast = fast_head(tmp_path / "head", target, "tiny-target")
    [saved] = list((tmp_path / "tuning").glob("EAGLE-head-*.json"))
    seconds = json.loads(saved.read_text())["result"]
    assert set(seconds) == set(head_variants())
    dtype, _ = HEAD_VARIANTS[min(seconds, key=seconds.get)]
    assert fast.feature_scale.dtype == dtype
    assert ("bfloat16 packed" in seconds) == (cpu_path == "native" and torch.ops.mkldnn._is_mkldnn_bf16_supported())
    # a tree level, timed with the chosen variant: what the tree and the hybrid price their head passes at
    tree_level, chain = draft_pass("tiny-target", "eagle-tree:head"), draft_pass("tiny-target", "eagle:head")
    assert tree_level[1] == chain[1] == min(seconds, key=seconds.get) and tree_level[0] > 0
    assert len(list((tmp_path / "tuning").glob("EAGLE-tree-level-*.json"))) == 1


def test_head_drafts_are_both_accepted_and_rejected(target):
    """Identity above means something only if the head is sometimes right and sometimes wrong: a head
    that proposes the target's own greedy token for the token it has just read (the tiny target loops)."""
    head = random_head(target, list(range(VOCAB)), seed=3)
    summary = None
    accepted = drafted = 0
    for prompt in ([1, 2, 3, 4], PROMPT, [7, 7, 7, 7, 7]):
        events = list(
            speculative(target, EagleDrafter(head), prompt, GenerationConfig(max_new_tokens=60), DraftConfig(k=3))
        )
        summary = events[-1].summary
        accepted += summary.accepted
        drafted += summary.drafted
    assert 0 < accepted < drafted


def test_q_is_a_distribution_over_target_ids_and_zero_outside_the_draft_vocabulary(target, head):
    drafter = EagleDrafter(head)
    cached = CachedModel(target)
    _, features = cached.forward_with_features(PROMPT, drafter.feature_layers)
    drafter.observe_features(0, features)
    draft = drafter.propose(PROMPT + [3], 4, Sampler(SamplingConfig(temperature=1.0)))
    assert draft.probs.shape == (4, VOCAB)
    assert torch.allclose(draft.probs.sum(-1), torch.ones(4))
    assert (draft.probs[:, ~head.t2d] == 0).all()
    assert all(head.t2d[t] for t in draft.tokens)


@pytest.mark.parametrize(
    "sampling", [SamplingConfig(), SamplingConfig(temperature=0.7, top_k=6, top_p=0.8)], ids=["greedy", "warped"]
)
def test_a_tree_ranks_by_the_draft_distribution_over_its_own_vocabulary(head, sampling):
    """A tree ranks children by q over the draft vocabulary alone (_tree_q): the same probabilities, warpers and
    all, as the full q over the target's ids, which is zero elsewhere."""
    drafter = EagleDrafter(head, tree=TreeShape())
    predicted = torch.randn(3, head.config.hidden_size, generator=torch.Generator().manual_seed(0)) * 4
    sampler = Sampler(sampling)
    full, own = drafter._q(predicted, sampler), drafter._tree_q(predicted, sampler)
    assert own.shape == (3, len(DRAFT_IDS))
    torch.testing.assert_close(own, full[:, head.draft_to_target], rtol=1e-6, atol=1e-7)
    assert (full[:, ~head.t2d] == 0).all()
    if sampling.top_k:
        assert ((own > 0).sum(-1) <= sampling.top_k).all()


def test_id_map_round_trips(head, target, tmp_path):
    ids = head.draft_to_target
    assert ids.tolist() == sorted(set(ids.tolist()))  # distinct target ids
    assert head.t2d.sum() == len(ids) and head.t2d[ids].all()
    save_head(head, tmp_path / "head")
    loaded = load_head(tmp_path / "head", target)
    assert torch.equal(loaded.draft_to_target, ids) and torch.equal(loaded.t2d, head.t2d)
    feats = torch.randn(1, 5, target.config.hidden_size)
    tokens = torch.tensor([[1, 2, 3, 4, 5]])
    pos = torch.arange(5)[None]

    a = head(feats, tokens, pos, head.new_cache(), additive_mask(causal_mask(5, 0), torch.float32))
    b = loaded(feats, tokens, pos, loaded.new_cache(), additive_mask(causal_mask(5, 0), torch.float32))
    assert torch.allclose(a, b, atol=1e-2)  # saved in float16


def test_rollback_after_partial_acceptance_matches_a_fresh_drafter(target, any_head):
    """After steps with rejections, the head's next proposal equals that of a new drafter given
    only the verified context and the target's features for it."""
    head = any_head
    drafter = EagleDrafter(head)
    run = speculative(target, drafter, PROMPT, GenerationConfig(max_new_tokens=30), DraftConfig(k=4))
    events = [next(run) for _ in range(6)]
    partial = [e for e in events if isinstance(e, SpecStep) and e.accepted_count < e.drafted_count]
    assert partial, "the test needs a step that rejected a draft"
    context = PROMPT + generated_tokens(events)
    sampler = Sampler(SamplingConfig())
    continued = drafter.propose(context, 4, sampler)

    fresh = EagleDrafter(head)
    _, features = CachedModel(target).forward_with_features(context[:-1], fresh.feature_layers)
    fresh.observe_features(0, features)
    expected = fresh.propose(context, 4, sampler)
    assert continued.tokens == expected.tokens
    assert torch.allclose(continued.probs, expected.probs, atol=1e-4)
    run.close()


# ---- sampling with a reduced draft vocabulary --------------------------------------------------


@pytest.fixture(scope="module")
def small_target():
    return tiny_llama(seed=11, vocab_size=SMALL_VOCAB)


def reduced_vocabulary_head(target, layers: tuple[int, ...] = (), draft_layers: int = 1):
    # q is zero for tokens 5, 6 and 7, which the target can still emit (through the residual).
    return random_head(target, [0, 1, 2, 3, 4], seed=5, sharpness=6.0, layers=layers, draft_layers=draft_layers)


@pytest.fixture(
    scope="module", params=[((), 1), ((0, 1), 1), ((), 2)], ids=["last layer", "fused layers", "two layers"]
)
def small_head(small_target, request):
    return reduced_vocabulary_head(small_target, *request.param)


def head_sample_counts(target, head, runs: int) -> tuple[list[int], list[int]]:
    firsts, seconds = [0] * SMALL_VOCAB, [0] * SMALL_VOCAB
    for seed in range(runs):
        sampling = SamplingConfig(
            temperature=SAMPLING.temperature, top_p=SAMPLING.top_p, top_k=SAMPLING.top_k, seed=seed
        )
        config = GenerationConfig(max_new_tokens=3, sampling=sampling)
        tokens = generated_tokens(speculative(target, EagleDrafter(head), [1, 2, 3], config, DraftConfig(k=2)))
        firsts[tokens[0]] += 1
        seconds[tokens[1]] += 1
    return firsts, seconds


def test_head_sampling_matches_target_distribution(small_target, small_head):
    first, second = exact_marginals(small_target, [1, 2, 3], SAMPLING)
    assert first[5:].sum() > 0.05, "the target must put mass on tokens the head cannot propose"
    firsts, seconds = head_sample_counts(small_target, small_head, runs=1500)
    assert sum(seconds[5:]) > 0
    assert assert_matches(firsts, first) > 1e-3
    assert assert_matches(seconds, second) > 1e-3


def test_head_distribution_test_catches_always_accept(small_target, monkeypatch):
    """The control: the same test fails under a broken rule (once: its power is the rule's, not the head's)."""

    def always_accept(draft_tokens, draft_probs, target_probs, sampler, parents=None, confidence=None):
        k = draft_tokens.shape[0]
        return Verdict(
            tuple(range(k)), sampler.pick(target_probs[k]), (1.0,) * k, (1.0,) * k, (1.0,) * k, 1.0, RATIO, ()
        )

    monkeypatch.setattr(engine, "verify", always_accept)
    first, second = exact_marginals(small_target, [1, 2, 3], SAMPLING)
    firsts, seconds = head_sample_counts(small_target, reduced_vocabulary_head(small_target), runs=1500)
    assert min(assert_matches(firsts, first), assert_matches(seconds, second)) < 1e-6


# ---- files ---------------------------------------------------------------------------------------


def test_missing_head_is_refused_with_a_message(target, tmp_path):
    with pytest.raises(ModelLoadError, match="missing"):
        load_head(tmp_path / "nothing-here", target)


def test_truncated_weights_are_refused(target, head, tmp_path):
    save_head(head, tmp_path / "h")
    weights = tmp_path / "h" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    with pytest.raises(ModelLoadError, match="damaged"):
        load_head(tmp_path / "h", target)


def test_unreadable_config_is_refused(target, head, tmp_path):
    save_head(head, tmp_path / "h")
    (tmp_path / "h" / "config.json").write_text("{not json")
    with pytest.raises(ModelLoadError, match="unreadable"):
        load_head(tmp_path / "h", target)


def test_head_made_for_another_model_is_refused(head, tmp_path):
    save_head(head, tmp_path / "h")
    other = tiny_llama(seed=2, vocab_size=48)
    with pytest.raises(ModelLoadError, match="made for tiny"):
        load_head(tmp_path / "h", other)


def test_id_map_outside_the_vocabulary_is_refused(target, head, tmp_path):
    save_head(head, tmp_path / "h")
    config = json.loads((tmp_path / "h" / "config.json").read_text())
    from safetensors.torch import load_file, save_file

    tensors = load_file(str(tmp_path / "h" / "model.safetensors"))
    tensors["d2t"] = tensors["d2t"] + VOCAB
    save_file(tensors, str(tmp_path / "h" / "model.safetensors"))
    assert config["vocab_size"] == VOCAB
    with pytest.raises(ModelLoadError, match="outside"):
        load_head(tmp_path / "h", target)


def test_a_head_file_for_another_feature_layout_is_refused(target, fused_head, tmp_path):
    """Fused weights with an EAGLE-1 config, and a config whose layers this code cannot read."""
    save_head(fused_head, tmp_path / "h")
    config = json.loads((tmp_path / "h" / "config.json").read_text())
    assert config["feature_layers"] == [0, 1]
    (tmp_path / "h" / "config.json").write_text(
        json.dumps({**config, "architecture": "eagle1-llama-decoder-layer", "feature_layers": []})
    )
    with pytest.raises(ModelLoadError, match="does not match its feature layout"):
        load_head(tmp_path / "h", target)
    (tmp_path / "h" / "config.json").write_text(json.dumps({**config, "feature_layers": [1, 0]}))
    with pytest.raises(ModelLoadError, match="feature layout this version cannot run"):
        load_head(tmp_path / "h", target)
    (tmp_path / "h" / "config.json").write_text(json.dumps(config))
    assert load_head(tmp_path / "h", target).config.layers == (0, 1)


def test_a_head_file_whose_config_and_weights_disagree_on_its_depth_is_refused(target, head, deep_head, tmp_path):
    """A one-layer file whose config asks for two, a two-layer file whose config says one, and depths no head has."""
    for saved, claimed, message in (
        (head, 2, "does not fit its own config"),
        (deep_head, 1, "does not fit its own config"),
        (head, 0, "decoder layers"),
        (head, 99, "decoder layers"),
    ):
        save_head(saved, tmp_path / "h")
        config = json.loads((tmp_path / "h" / "config.json").read_text())
        (tmp_path / "h" / "config.json").write_text(json.dumps({**config, "draft_layers": claimed}))
        with pytest.raises(ModelLoadError, match=message):
            load_head(tmp_path / "h", target)
    save_head(deep_head, tmp_path / "h")
    assert load_head(tmp_path / "h", target).config.draft_layers == 2

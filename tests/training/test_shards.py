"""Generation jobs: the shard format, atomic writes, the batch plan; the batched decoder (transformers'
greedy tokens, rows leaving as they end, the sampler, the quorum and loop stops); features recomputed
from a shard's ids."""

from dataclasses import replace

import numpy as np
import pytest
import torch
from scipy.stats import chisquare
from transformers import TopPLogitsWarper

from tests.conftest import layer_outputs, tiny_llama
from training.corpus_answers import made_features
from training.corpus_features import ids_only, with_layers
from training.generation import NUCLEUS_CANDIDATES, NucleusWarper, Sampling, encode_chat, generate, sample
from training.shards import (
    Job,
    Record,
    Request,
    ShardBudget,
    Stopped,
    features_path,
    plan,
    read_features,
    read_job,
    read_shard,
    run,
    token_key,
    write_shard,
)
from training.tiny_chat import tiny_chat_model, tiny_chat_tokenizer, tiny_target


@pytest.fixture(scope="module")
def chat():
    tokenizer = tiny_chat_tokenizer()
    return tiny_chat_model(tokenizer), tokenizer


def test_a_shard_keeps_ids_families_and_temperatures_in_two_bytes_a_token(tmp_path):
    records = [
        Record(3, [1, 2, 3], [4, 5, 0], True, "magpie/chat", 0.7),
        Record(1, [9], [60_000], False, "passage/summarization", 0.0),
    ]
    write_shard(tmp_path / "shard-00000.npz", records)
    assert read_shard(tmp_path / "shard-00000.npz") == records
    assert not list(tmp_path.glob("*.tmp"))  # written under another name, then renamed
    with np.load(tmp_path / "shard-00000.npz") as data:
        assert data["tokens"].dtype == np.uint16


def test_the_plan_batches_one_temperature_and_similar_lengths_and_shortens_long_batches():
    requests = [
        Request(tuple(range(n)), "f", t) for n, t in [(5, 0.0), (900, 0.0), (6, 1.0), (7, 0.0), (950, 0.0), (8, 1.0)]
    ]
    batches = plan(requests, batch_size=4, max_new_tokens=64, seed=0)
    assert sorted(i for b in batches for i in b) == list(range(6))
    assert all(len({requests[i].temperature for i in b}) == 1 for b in batches)
    assert sorted(map(sorted, batches)) == [[0, 3], [1], [2, 5], [4]]  # the long prompts do not fit two to a batch


def test_a_job_refuses_a_folder_holding_another_jobs_shards(chat, tmp_path):
    model, tokenizer = chat
    stops = [tokenizer.eos_token_id]
    prompt = tuple(encode_chat(tokenizer, [{"role": "user", "content": "Write two lines about green tea."}]))
    job = Job("answers", tmp_path, top_p=1.0, max_new_tokens=4, batch_size=2)
    run(model, [Request(prompt, "f", 0.0)] * 3, job, stops, ShardBudget())
    assert len(read_job(tmp_path)) == 3
    with pytest.raises(RuntimeError, match="other prompts or settings"):
        run(model, [Request(prompt, "f", 1.0)] * 3, job, stops, ShardBudget())


def test_the_shard_budget_stops_a_run_between_shards(chat, tmp_path):
    model, tokenizer = chat
    prompt = tuple(encode_chat(tokenizer, [{"role": "user", "content": "Tell me about owls."}]))
    job = Job("answers", tmp_path, top_p=1.0, max_new_tokens=4, batch_size=1)
    with pytest.raises(Stopped):
        run(model, [Request(prompt, "f", 1.0)] * 3, job, [tokenizer.eos_token_id], ShardBudget(2))
    assert len(list(tmp_path.glob("shard-*.npz"))) == 2


def test_the_user_turn_header_comes_from_the_chat_template(chat):
    _, tokenizer = chat
    system = [{"role": "system", "content": "You are a helpful assistant."}]
    rendered = tokenizer.apply_chat_template(system, tokenize=False) + "<|im_start|>user\n"
    assert (
        encode_chat(tokenizer, system, open_role="user") == tokenizer(rendered, add_special_tokens=False)["input_ids"]
    )


def test_a_quorum_stops_the_batch_once_most_rows_have_ended(chat):
    model, tokenizer = chat
    prompts = [
        encode_chat(tokenizer, [{"role": "user", "content": f"Tell me about {w}."}])
        for w in ("owls", "tea", "rain", "chess")
    ]
    torch.manual_seed(0)
    whole = generate(model, prompts, Sampling(1.0, max_new_tokens=40), [tokenizer.eos_token_id])
    torch.manual_seed(0)
    cut = generate(model, prompts, Sampling(1.0, max_new_tokens=40, quorum=0.5), [tokenizer.eos_token_id])
    assert sum(c.finished for c in cut) >= 2
    assert (
        max(len(c.ids) for c in cut) == sorted(len(c.ids) for c in whole)[1] < max(len(c.ids) for c in whole)
    )  # stopped at the second row's end


def test_greedy_rows_are_transformers_generates_tokens_though_ended_rows_leave_the_batch():
    model = tiny_llama(0, fast=False)
    prompts = [[1, 2, 3], [20, 21], [4, 5], [6, 7, 8, 9], [10]]
    stops = [18, 10]  # rows end at different steps, one of them at once
    ours = generate(model, prompts, Sampling(0.0, max_new_tokens=60), stops)
    width = max(map(len, prompts))
    padded = torch.tensor([[stops[0]] * (width - len(p)) + p for p in prompts])
    mask = (padded != -1).long()
    for row, p in enumerate(prompts):
        mask[row, : width - len(p)] = 0
    out = model.generate(
        input_ids=padded,
        attention_mask=mask,
        max_new_tokens=60,
        do_sample=False,
        eos_token_id=stops,
        pad_token_id=stops[0],
    )
    for row, continuation in zip(out[:, width:].tolist(), ours):
        end = next((i + 1 for i, t in enumerate(row) if t in stops), len(row))
        assert continuation.ids == row[:end] and continuation.finished == (end < len(row) or row[-1] in stops)
    assert len({len(c.ids) for c in ours}) > 2 and sum(c.finished for c in ours) >= 2


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_the_decoder_keeps_the_features_a_teacher_forced_pass_makes(temperature):
    """Each row's kept features against the last layer's output computed here over its prompt and continuation,
    one unpadded sequence at a time: rows padded on the left, ending at different steps, leaving the batch."""
    model = tiny_llama(0, fast=False)
    prompts = [[1, 2, 3], [20, 21], [4, 5], [6, 7, 8, 9], [10]]
    stops = [18, 10]
    torch.manual_seed(3)
    plain = generate(model, prompts, Sampling(temperature, max_new_tokens=40), stops)
    torch.manual_seed(3)
    kept = generate(model, prompts, Sampling(temperature, max_new_tokens=40), stops, keep_features=True)
    assert [c.ids for c in kept] == [c.ids for c in plain] and all(c.features is None for c in plain)
    assert len({len(c.ids) for c in kept}) > 2
    for prompt, c in zip(prompts, kept):
        own = layer_outputs(model, prompt + c.ids)[-1]
        assert c.features.dtype == torch.float16 and c.features.shape == own.shape
        torch.testing.assert_close(c.features[:-1].float(), own[:-1], rtol=2e-3, atol=2e-3)
        assert not c.features[-1].any()  # the last token is never fed


def test_an_answer_job_keeps_its_features_beside_each_shard_and_finds_them_by_tokens(chat, tmp_path):
    model, tokenizer = chat
    prompts = [
        tuple(encode_chat(tokenizer, [{"role": "user", "content": f"Tell me about {w}."}]))
        for w in ("owls", "tea", "rain")
    ]
    job = Job("responses", tmp_path / "responses", top_p=1.0, max_new_tokens=12, batch_size=2, keep_features=True)
    records = run(model, [Request(p, "f", 1.0) for p in prompts], job, [tokenizer.eos_token_id], ShardBudget())
    shards = sorted((tmp_path / "responses").glob("shard-*.npz"))
    assert len(shards) == 2 and all(features_path(s, read_shard(s)).is_file() for s in shards)
    made = made_features(tmp_path)
    recomputed = with_layers(model, ids_only(records), ())
    for record, sequence in zip(records, recomputed, strict=True):
        rows = torch.from_numpy(np.array(made[token_key(record.prompt + record.response)]))
        torch.testing.assert_close(rows[:-1], sequence.features[:-1], rtol=2e-3, atol=2e-3)
    # A shard written again with other tokens does not pair with the features file beside it.
    other = [replace(r, response=r.response[:-1]) for r in read_shard(shards[0])]
    write_shard(shards[0], other)
    assert read_features(shards[0], other) is None and len(made_features(tmp_path)) == len(made) - len(other)


def test_sampling_draws_each_token_with_its_probability_across_blocks():
    torch.manual_seed(0)
    vocabulary = 600  # two blocks and a padded third
    weights = torch.rand(vocabulary) ** 3
    weights[520:] = 0  # trailing zeros, across the last block's padding
    weights[[3, 255, 256, 300]] = 0  # zeros inside and at a block's edges
    probs = torch.stack([weights / weights.sum(), torch.nn.functional.one_hot(torch.tensor(7), vocabulary).float()])
    draws = torch.cat([sample(probs.repeat(5_000, 1)).view(5_000, 2) for _ in range(20)])  # 100,000 rows of each
    counts = torch.bincount(draws[:, 0], minlength=vocabulary)
    assert counts[probs[0] == 0].sum() == 0 and (draws[:, 1] == 7).all()
    expected = probs[0].double() * 100_000
    tested = expected >= 5  # chi-square's rule of thumb; the rest are pooled in one bin
    observed = torch.cat([counts[tested], counts[~tested].sum()[None]]).numpy()
    expected = torch.cat([expected[tested], expected[~tested].sum()[None]])
    expected *= 100_000 / expected.sum()
    assert chisquare(observed, expected.numpy()).pvalue > 1e-3
    # the control: a fifth more weight on the first 100 tokens is caught
    skewed = expected.clone()
    skewed[:100] *= 1.2
    skewed *= expected.sum() / skewed.sum()
    assert chisquare(observed, skewed.numpy()).pvalue < 1e-6


def test_the_nucleus_cut_keeps_the_tokens_transformers_top_p_keeps():
    """Among the top candidates where they hold the nucleus, and through the library's cut where they do not
    (the flat rows); peaked and flat rows alike, at the corpus's 0.95 and a tighter 0.5."""
    generator = torch.Generator().manual_seed(0)
    vocabulary = 49_152
    peaked = (
        torch.randn(48, vocabulary, generator=generator) * torch.linspace(5, 12, 48)[:, None]
    )  # nuclei of 1-200 tokens
    flat = torch.randn(4, vocabulary, generator=generator) * 0.1  # a nucleus of thousands of tokens
    scores = torch.cat([peaked, flat])
    for top_p in (0.95, 0.5):
        ours, theirs = NucleusWarper(top_p)(None, scores), TopPLogitsWarper(top_p)(None, scores)
        assert torch.equal(ours.isfinite(), theirs.isfinite()), top_p
        assert torch.equal(ours[ours.isfinite()], scores[ours.isfinite()])
        assert (ours[:48].isfinite().sum(-1) < NUCLEUS_CANDIDATES).all()  # the peaked rows' cut among the candidates
        assert (ours[48:].isfinite().sum(-1) > NUCLEUS_CANDIDATES).all()  # the flat rows' past them


def test_a_looping_row_stops_where_its_loop_repeats_and_comes_back_unfinished():
    model = tiny_llama(0, fast=False)  # greedy, a random model falls into short cycles
    prompts = [[1, 2, 3], [4, 5], [6, 7, 8, 9], [10]]
    whole = generate(model, prompts, Sampling(0.0, max_new_tokens=200), [31])
    cut = generate(model, prompts, Sampling(0.0, max_new_tokens=200, stop_loops=True), [31])
    window = 16
    for full, short in zip(whole, cut):
        assert not short.finished and short.ids == full.ids[: len(short.ids)] and len(short.ids) < len(full.ids)

        def repeats(ids):
            return sum(ids[i : i + window] == ids[-window:] for i in range(len(ids) - window + 1))

        assert repeats(short.ids) == 3 and repeats(short.ids[:-1]) < 3  # stopped at the third sighting, not later


def test_a_row_that_ended_is_not_taken_for_a_loop_while_the_others_go_on():
    model = tiny_llama(0, fast=False)
    prompts = [[1, 2, 3], [20, 21]]
    free = generate(model, prompts, Sampling(0.0, max_new_tokens=120), [31])
    stop = next(t for t in free[0].ids[:8] if t not in free[1].ids)  # ends row 0 early, never row 1
    plain = generate(model, prompts, Sampling(0.0, max_new_tokens=120), [stop])
    guarded = generate(model, prompts, Sampling(0.0, max_new_tokens=120, stop_loops=True), [stop])
    assert plain[0].finished and guarded[0] == plain[0]  # padded with its stop token for 100+ steps
    assert not guarded[1].finished and len(guarded[1].ids) < len(plain[1].ids)


def test_features_are_recomputed_from_the_ids():
    target = tiny_target()
    records = [Record(i, [1, 2, 3, 4][: 2 + i], [5, 6, 255], True, "f", 0.0) for i in range(3)]
    out = with_layers(target, ids_only(records), (), batch_tokens=12)
    assert [s.tokens.tolist() for s in out] == [r.prompt + r.response for r in records]
    assert [s.prompt_length for s in out] == [2, 3, 4]
    assert all(
        s.features.shape == (len(s.tokens), target.config.hidden_size) and s.features.dtype == torch.float16
        for s in out
    )


def test_fused_features_are_the_layers_outputs_side_by_side_in_the_given_order():
    """EAGLE-3's training features against the layers' outputs computed one by one, a sequence at a time and
    unpadded, on a 3-layer target whose last layer is not among them: the targets stay the last layer's."""
    target = tiny_llama(seed=4, vocab_size=256, layers=3, fast=False)
    records = [Record(i, [7, 1, 2, 3, 4][: 5 - 2 * i], [5, 6, 255], True, "f", 0.0) for i in range(3)]  # longest first
    plain = with_layers(target, ids_only(records), ())
    fused = with_layers(target, plain, (0, 1), batch_tokens=12)
    assert [s.tokens.tolist() for s in fused] == [
        r.prompt + r.response for r in records
    ]  # the order given, not by length
    for s in fused:
        own = layer_outputs(target, s.tokens.tolist())
        torch.testing.assert_close(
            s.features.float(), torch.cat([own[0], own[1]], dim=-1), rtol=2e-3, atol=2e-3
        )  # float16
        torch.testing.assert_close(s.targets.float(), own[2], rtol=2e-3, atol=2e-3)
        twin = [p for p in plain if p.tokens.tolist() == s.tokens.tolist()][0]
        assert torch.equal(s.targets, twin.features) and twin.last_layer is None

"""The corpus recipe on a tiny random target: prompts generated, filtered, deduplicated, sharded,
and resumed after interruptions without a shard redone; its prompt set shares nothing with an
evaluation set."""

import copy
import json
import shutil
from dataclasses import asdict, replace

import numpy as np
import pytest
import torch

from tests.conftest import hardware_bfloat16
from training import corpus_answers
from training.corpus import (
    Build,
    Recipe,
    _passage_rejected,
    _whole_paragraphs,
    assemble,
    embedded_target,
    generation_dtype,
    main,
    prompt_key,
    read_prompt_set,
    smoke_target,
)
from training.eval_overlap import OverlapFilter, evaluation_prompts
from training.generation import Sampling, encode_chat, generate
from training.quality import TextLimits
from training.shards import ShardBudget, read_job, read_shard
from training.task_families import load_seeds
from training.text_ngrams import normalised

STAGES = ("user-turns", "articles", "first-answers", "second-turns", "responses")


@pytest.fixture(scope="module")
def whole(tmp_path_factory):
    """A smoke corpus built in one uninterrupted run."""
    out = tmp_path_factory.mktemp("whole")
    records = main(["--smoke", "--out", str(out)])
    return out, records


def shard_files(out):
    return {p.relative_to(out): p.stat().st_mtime_ns for p in out.glob("*/shard-*.npz")}


def test_smoke_corpus_has_every_stage_and_reaches_its_token_target(whole):
    out, records = whole
    assert all(list((out / stage).glob("shard-*.npz")) for stage in STAGES)
    report = json.loads((out / "report.json").read_text())
    assert sum(len(r.response) for r in records) >= report["recipe"]["target_tokens"]
    assert {"magpie", "two_turn", "family", "passage", "templated"} <= set(report["sources"])
    assert "near-duplicate" in report["dropped"]["user-turns"]  # the generated turns went through dedupe
    assert set(report["diversity"]["magpie user turns"]["distinct"]) == {"distinct-1", "distinct-2", "distinct-3"}
    # Every response record says where its prompt came from and how it was sampled.
    assert all("/" in r.family and r.temperature in (0.0, 0.7, 1.0) for r in records)
    # The answers, which the head trains on, keep their features beside their shards; the other stages do not.
    kept = {p.parent.name for p in out.glob("*/shard-*.features-*.npy")}
    assert kept == set(corpus_answers.ANSWER_JOBS)
    assert len(list(out.glob("responses/shard-*.features-*.npy"))) == len(list(out.glob("responses/shard-*.npz")))


def test_shards_that_kept_no_features_get_the_ones_generation_would_have_kept(whole, tmp_path):
    """--keep-features: shards written before generation kept features (or on another machine) get them once,
    so a feature store copies them instead of remaking them each time the corpus grows."""
    out = tmp_path / "corpus"
    shutil.copytree(whole[0], out)
    removed = {
        path: np.load(path)
        for path in out.glob("*/shard-*.features-*.npy")
        if path.parent.name == "first-answers" or path.name.startswith("shard-00001.")
    }
    for path in removed:
        path.unlink()
    assert main(["--smoke", "--out", str(out), "--keep-features"]) is None
    for path, kept in removed.items():
        remade = np.load(path)  # the same name: a checksum of the same tokens
        # Equal but for each answer's last row, which generation leaves zero (never fed back, never trained on).
        assert remade.shape == kept.shape and not np.allclose(remade, kept, atol=2e-3)
        records = read_shard(path.with_name(path.name.split(".")[0] + ".npz"))
        lasts = np.cumsum([len(r.prompt) + len(r.response) for r in records]) - 1
        np.testing.assert_allclose(
            np.delete(remade, lasts, axis=0).astype(np.float32),
            np.delete(kept, lasts, axis=0).astype(np.float32),
            rtol=2e-3,
            atol=2e-3,
        )
    assert corpus_answers.keep_missing_features(out, smoke_target().model) == 0  # nothing is made twice


def test_only_a_float32_targets_answers_keep_their_features(tmp_path):
    """The store recomputes in float32 or under bfloat16 autocast; a bfloat16 model's rows are neither."""
    target = smoke_target()
    half = replace(target, model=copy.deepcopy(target.model).to(torch.bfloat16))
    for writer, answers_keep in ((target, True), (half, False)):
        build = Build(writer, Recipe.smoke(), tmp_path, ShardBudget(), {}, OverlapFilter(), {})
        assert (
            build.job("responses", 1.0, 8).keep_features
            == build.job("first-answers", 1.0, 8).keep_features
            == answers_keep
        )
        assert not build.job("articles", 0.95, 8).keep_features


def test_an_interrupted_corpus_resumes_without_redoing_a_shard(whole, tmp_path):
    out = tmp_path / "parts"
    seen: dict = {}
    runs = 0
    while True:
        runs += 1
        records = main(["--smoke", "--out", str(out), "--max-shards", "4"])
        files = shard_files(out)
        assert all(files[name] == written for name, written in seen.items())  # nothing rewritten
        assert len(files) - len(seen) <= 4
        seen = files
        if records is not None:
            break
    assert runs > 3  # it was stopped within the prompt stages as well as the responses
    whole_out, whole_records = whole
    assert set(seen) == set(shard_files(whole_out))
    assert records == whole_records  # the same shards, the same ids, as one uninterrupted run
    for stage in STAGES:
        assert read_job(out / stage) == read_job(whole_out / stage)


def test_an_article_cut_short_loses_only_its_unfinished_paragraph():
    assert (
        _whole_paragraphs("First one.\n\nSecond one.\n\nThird, cut in the mid", finished=False)
        == "First one.\n\nSecond one."
    )
    assert (
        _whole_paragraphs("First one.\n\nSecond one.\n\n", finished=False) == "First one.\n\nSecond one."
    )  # cut at a break
    assert _whole_paragraphs("Only one, cut in the mid", finished=False) == ""
    assert _whole_paragraphs(" First one.\n\nSecond one.\n", finished=True) == "First one.\n\nSecond one."


def test_a_rejected_article_says_why():
    limits = TextLimits(min_words=1, max_words=3000)
    assert _passage_rejected("", "", limits, False) == "cut short in its first paragraph"
    assert _passage_rejected("go on " * 20, "", limits, False) == "first paragraph: repetition"
    assert _passage_rejected("A fine paragraph.", "A fine paragraph.", limits, False) == "length"
    assert _passage_rejected("A fine paragraph.", "A fine paragraph.", limits, True) is None


def test_a_chats_two_answers_are_held_out_together_and_the_interleaving_is_the_plans(whole, monkeypatch):
    monkeypatch.setattr(corpus_answers, "HELDOUT_EVERY", 3)
    out, _ = whole
    written = corpus_answers.answers(out)
    first_prompts = [r.prompt for r in read_job(out / "first-answers")]
    firsts = [a for a in written if a.record.prompt in first_prompts]
    pairs = [
        (f, a)
        for f in firsts
        for a in written
        if a is not f and a.record.prompt[: len(f.record.prompt)] == f.record.prompt
    ]
    assert pairs and all(f.heldout == a.heldout for f, a in pairs)
    assert any(f.heldout for f, _ in pairs) and not all(a.heldout for a in written)
    # each job's records keep their plan order, and both jobs start early in the mixed list
    for name in ("responses", "first-answers"):
        job = read_job(out / name)
        assert [a.record for a in written if a.record in job] == job
    kinds = ["first" if a in firsts else "response" for a in written[: len(written) // 2]]
    assert "first" in kinds and "response" in kinds


def test_the_prompt_set_has_no_overlap_with_any_evaluation_set(whole):
    prompts = read_prompt_set(whole[0])
    user_turns = [turn for p in prompts for turn in p.turns[::2]]
    fresh = OverlapFilter()
    assert user_turns and not [t for t in user_turns if fresh.overlap(t)]
    # And an independent check: no evaluation prompt is contained in a training prompt.
    evaluation = [normalised(t) for texts in evaluation_prompts().values() for t in texts]
    training = [normalised(t) for t in user_turns]
    assert not [e for e in evaluation if any(e in t for t in training)]


def test_the_prompt_set_has_no_repeats(whole):
    keys = ["\n".join(p.turns[::2]) for p in read_prompt_set(whole[0])]
    assert len(set(keys)) == len(keys)


def test_a_corpus_built_after_another_repeats_none_of_its_prompts(whole, tmp_path):
    out, _ = whole
    build = Build(None, Recipe.smoke(), tmp_path, ShardBudget(None), load_seeds(), OverlapFilter(), {}, after=(out,))
    earlier = {prompt_key(p) for p in read_prompt_set(out)}
    # the same recipe and seed, as the earlier corpus: its family and templated prompts come again,
    # and every one is dropped
    again = assemble(build, [], [], [])
    assert not earlier & {prompt_key(p) for p in again}
    assert build.dropped["prompt set"]["in an earlier corpus"] > 0
    with pytest.raises(SystemExit):  # --after must name a corpus with a prompt set
        main(["--smoke", "--out", str(tmp_path / "second"), "--after", str(tmp_path / "missing")])


def test_a_fused_head_trains_on_the_corpus_from_ids_and_holds_out_its_own_prompts(whole, tmp_path, monkeypatch):
    """train_head --corpus: ids in, the training features made once into the store, the held-out ones in memory."""
    from specdec_core.drafters.eagle_head import load_head
    from training.tiny_chat import tiny_chat_model, tiny_chat_tokenizer
    from training.train_head import Settings, corpus_data, train_and_save

    monkeypatch.setattr(corpus_answers, "HELDOUT_EVERY", 5)  # the smoke corpus is small
    out, responses = whole
    written = corpus_answers.answers(out)
    assert len(written) == len(responses) + len(read_job(out / "first-answers")) > len(responses)
    tokenizer = tiny_chat_tokenizer()
    target = tiny_chat_model(tokenizer)
    settings = Settings(
        draft_vocab=256,
        depth=2,
        epochs=3,
        batch_tokens=1024,
        lr=3e-3,
        evals_per_epoch=1,
        feature_layers="0,1",
        corpus=str(out),
    )
    train_set, heldout_set = corpus_data(settings, target, tmp_path)
    assert len(train_set) + len(heldout_set) == len(written)
    assert train_set[0].features.shape[1] == 2 * target.config.hidden_size and list(
        (tmp_path / "corpus-features").iterdir()
    )
    assert len(heldout_set) == sum(a.heldout for a in written) > 0
    assert heldout_set[0].features.shape[1] == 2 * target.config.hidden_size
    capped, _ = corpus_data(Settings(corpus=str(out), corpus_tokens=40), target, tmp_path)
    assert 0 < len(capped) < len(train_set)  # the learning curve's smaller sets
    both_train, both_heldout = corpus_data(
        replace(settings, corpus=f"{out},{out}"), target, tmp_path
    )  # two corpora, in order
    assert [s.tokens.tolist() for s in both_train] == [s.tokens.tolist() for s in train_set + train_set] and len(
        both_heldout
    ) == 2 * len(heldout_set)
    with pytest.raises(SystemExit, match="no answers"):
        corpus_data(replace(settings, corpus=f"{out},{tmp_path / 'empty'}"), target, tmp_path)
    curve = train_and_save(settings, target, tokenizer, "tiny chat", tmp_path / "head", None, work=tmp_path)
    assert curve[-1]["train_loss"] < curve[0]["train_loss"]
    assert load_head(tmp_path / "head", target).config.layers == (0, 1)
    # --init: that head trained further, from where it ended (not from scratch); a head of another layout is refused.
    further = train_and_save(
        replace(settings, epochs=1),
        target,
        tokenizer,
        "tiny chat",
        tmp_path / "further",
        None,
        work=tmp_path,
        init=tmp_path / "head",
    )
    assert further[0]["train_loss"] < curve[0]["train_loss"]
    saved = json.loads((tmp_path / "further" / "learning_curve.json").read_text())
    assert saved["init"] == str(tmp_path / "head")
    assert saved["earlier_runs"] == [asdict(settings)]  # the recipe: every run that made it, the init's first
    assert saved["curve"][: len(curve)] == curve  # the whole training in one curve: the init's, then this run's
    assert [p["train_tokens"] - curve[-1]["train_tokens"] for p in saved["curve"][len(curve) :]] == [
        p["train_tokens"] for p in further
    ]
    assert saved["curve"][-1]["epoch"] == pytest.approx(curve[-1]["epoch"] + further[-1]["epoch"], abs=1e-3)
    with pytest.raises(SystemExit, match="--init"):
        train_and_save(
            replace(settings, feature_layers=""),
            target,
            tokenizer,
            "tiny chat",
            tmp_path / "x",
            None,
            work=tmp_path,
            init=tmp_path / "head",
        )


def test_the_generation_dtype_follows_the_cpus_kernels(cpu_path, target_model):
    """bfloat16 only where the CPU multiplies it in hardware: on the AVX2 path (forced here) float32."""
    native_bf16 = hardware_bfloat16(cpu_path)
    assert generation_dtype("auto", target_model) == (torch.bfloat16 if native_bf16 else torch.float32)
    assert generation_dtype("float32", target_model) == torch.float32
    assert generation_dtype("bfloat16", target_model) == torch.bfloat16


@pytest.mark.slow
def test_the_bfloat16_target_writes_the_float32_targets_own_text():
    """The corpus's bfloat16 writer stays on-policy: the float32 target's argmax agrees with nearly
    every greedy token it writes (measured: 98% over 2,792 positions)."""
    writer, exact = embedded_target("bfloat16"), embedded_target("float32")
    assert writer.model.dtype == torch.bfloat16 and exact.model.dtype == torch.float32
    prompts = [
        encode_chat(exact.tokenizer, [{"role": "user", "content": text}])
        for text in (
            "How do I keep basil alive on a windowsill?",
            "Write a haiku about a late train.",
            "What is 17 times 23?",
        )
    ]
    agree = total = 0
    with torch.inference_mode():
        for prompt, written in zip(
            prompts, generate(writer.model, prompts, Sampling(0.0, max_new_tokens=40), exact.stops)
        ):
            logits = exact.model(torch.tensor([prompt + written.ids])).logits[0, len(prompt) - 1 : -1]
            agree += int((logits.argmax(-1) == torch.tensor(written.ids)).sum())
            total += len(written.ids)
    assert total >= 60 and agree / total >= 0.9, (agree, total)

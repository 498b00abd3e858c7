"""Training the draft head: the --smoke run learns and saves a head that loads; the data keeps its split."""

import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from specdec_core import SamplingConfig
from specdec_core.drafters.eagle import EagleDrafter
from specdec_core.drafters.eagle_head import EagleHead, HeadConfig, load_head, save_head
from specdec_core.errors import ModelLoadError
from specdec_core.kv_cache import CachedModel
from specdec_core.sampling import Sampler
from tests.conftest import hardware_bfloat16, tiny_llama
from training.corpus_features import with_layers
from training.draft_data import TrainingSequence, build_prompts
from training.tiny_chat import tiny_target
from training.train_head import Settings, loss_terms, main, new_head, start_from, training_dtype, unrolled_pass

ROOT = Path(__file__).resolve().parents[2]


def random_answers(count: int, seed: int) -> list[TrainingSequence]:
    """Random 40-token sequences whose last 32 are the answer, for loss and training tests on tiny_target."""
    rng = torch.Generator().manual_seed(seed)
    return [TrainingSequence(torch.randint(0, 256, (40,), generator=rng), 8, None) for _ in range(count)]


def test_smoke_training_lowers_the_loss_and_saves_a_head_that_loads(tmp_path):
    main(["--smoke", "--out", str(tmp_path / "head")])
    curve = json.loads((tmp_path / "head" / "learning_curve.json").read_text())["curve"]
    assert curve[-1]["train_loss"] < curve[0]["train_loss"]
    assert all(len(point["heldout_top1"]) == 3 for point in curve)  # three unrolled draft positions
    head = load_head(tmp_path / "head", tiny_target())
    assert head.config.draft_vocab_size == 128


def test_smoke_training_of_a_fused_head_lowers_the_loss_and_saves_a_head_that_loads(tmp_path):
    """EAGLE-3's layout: both layers of the tiny target read and fused; cross-entropy only."""
    main(["--smoke", "--feature-layers", "0,1", "--out", str(tmp_path / "head")])
    curve = json.loads((tmp_path / "head" / "learning_curve.json").read_text())["curve"]
    assert curve[-1]["train_loss"] < curve[0]["train_loss"]
    head = load_head(tmp_path / "head", tiny_target())
    assert head.config.layers == (0, 1) and head.fuse is not None and head.feature_scale.shape == (2 * 64,)


def test_smoke_training_of_a_two_layer_head_lowers_the_loss_and_saves_a_head_that_loads(tmp_path):
    main(["--smoke", "--draft-layers", "2", "--out", str(tmp_path / "head")])
    curve = json.loads((tmp_path / "head" / "learning_curve.json").read_text())["curve"]
    assert curve[-1]["train_loss"] < curve[0]["train_loss"]
    head = load_head(tmp_path / "head", tiny_target())
    assert head.config.draft_layers == 2 and len(head.upper_layers) == 1


def test_a_head_deepened_from_its_init_drafts_as_it_did_and_then_trains_its_new_layer(tmp_path):
    """--init with more --draft-layers: the added layer starts as the identity (the head's outputs are its init's,
    at every unrolled depth), and the loss's gradient reaches it. Fewer layers than the init has are refused."""
    target = tiny_target()
    torch.manual_seed(0)
    head = EagleHead(target, HeadConfig.for_target(target, "tiny", 48), torch.arange(48)).eval()
    save_head(head, tmp_path / "init")
    head = load_head(tmp_path / "init", target)  # the float16 round trip the deepened head also reads
    deeper = start_from(tmp_path / "init", target, Settings(draft_vocab=48, draft_layers=2, depth=3))
    assert deeper.config.draft_layers == 2 and len(deeper.upper_layers) == 1
    batch = random_answers(2, seed=3)
    tokens = torch.stack([s.tokens for s in batch])
    features = torch.stack([s.features for s in with_layers(target, batch, ())]).float()
    with torch.no_grad():
        before, after = (
            unrolled_pass(head, tokens, features, depth=3),
            unrolled_pass(deeper.eval(), tokens, features, depth=3),
        )
    assert all(torch.equal(a, b) for a, b in zip(before, after))
    loss_terms(
        deeper.train(), with_layers(target, batch, ()), Settings(draft_vocab=48, draft_layers=2, depth=3)
    ).backward()
    assert deeper.upper_layers[0].self_attn.o_proj.weight.grad.abs().sum() > 0
    save_head(deeper, tmp_path / "deep")
    with pytest.raises(SystemExit, match="2 decoder layers"):
        start_from(tmp_path / "deep", target, Settings(draft_vocab=48, draft_layers=1))


def test_smoke_training_resumes_from_its_checkpoint(tmp_path):
    main(["--smoke", "--out", str(tmp_path / "head")])
    first = json.loads((tmp_path / "head" / "learning_curve.json").read_text())["curve"]
    main(["--smoke", "--out", str(tmp_path / "head")])  # the checkpoint says it is done: nothing is redone
    again = json.loads((tmp_path / "head" / "learning_curve.json").read_text())["curve"]
    assert again == first


def test_held_out_prompts_never_enter_training():
    train = {p.text for p in build_prompts("train")}
    held_out = {p.text for p in build_prompts("heldout")}
    assert train and held_out and not train & held_out


def test_workload_and_test_prompts_never_enter_training():
    workloads = json.loads((ROOT / "assets" / "workloads.json").read_text())
    builtin = {p["text"] for s in workloads.values() for p in s["prompts"]}
    train = {p.text for p in build_prompts("train")}
    assert not builtin & train
    test_sources = "\n".join(f.read_text() for f in (ROOT / "tests").rglob("*.py"))
    assert not any(text in test_sources for text in train)


def test_serving_drafts_what_training_teaches_for_both_feature_layouts():
    """The drafter's first guess after each prefix (observe_features, then propose) is the argmax of what
    the unrolled training pass computes at that entry: the two read the same features the same way. On a
    3-layer target, the fused head reads layers 0 and 1, neither of them the last."""
    target = tiny_llama(seed=6, vocab_size=64, layers=3, fast=False)
    tokens = [1, 5, 9, 2, 6, 3, 7, 4, 8, 10, 11, 12]
    for layers in ((), (0, 1)):
        torch.manual_seed(0)
        head = EagleHead(target, HeadConfig.for_target(target, "tiny", 48, layers), torch.arange(48)).eval()
        with torch.no_grad():  # opinions that follow the input, so that argmaxes differ from entry to entry
            head.fc.weight.mul_(4.0)
            head.fc.bias.zero_()
        [sequence] = with_layers(target, [TrainingSequence(torch.tensor(tokens), 2, None)], layers)
        with torch.no_grad():
            taught = unrolled_pass(head, sequence.tokens[None], sequence.features[None].float(), depth=1)[0][0]
        expected = head.draft_to_target[head.logits(taught).argmax(-1)].tolist()  # entry j guesses token j + 2
        served = []
        for end in range(2, len(tokens)):
            drafter = EagleDrafter(head)
            _, features = CachedModel(target).forward_with_features(tokens[: end - 1], drafter.feature_layers)
            drafter.observe_features(0, features)
            served.append(drafter.propose(tokens[:end], 1, Sampler(SamplingConfig())).tokens[0])
        assert served == expected[: len(served)]
        assert len(set(served)) > 1


def test_a_feature_layout_or_depth_no_head_could_load_is_refused_before_training(tmp_path):
    for layers in ("1", "1,0", "0,0", "0,5"):
        with pytest.raises(ModelLoadError, match="feature layout"):
            main(["--smoke", "--feature-layers", layers, "--out", str(tmp_path / "head")])
    for depth in ("0", "9"):
        with pytest.raises(ModelLoadError, match="decoder layers"):
            main(["--smoke", "--draft-layers", depth, "--out", str(tmp_path / "head")])
    assert not (tmp_path / "head").exists()


def test_training_runs_in_bfloat16_only_where_the_cpu_computes_it_natively(cpu_path):
    native_bf16 = hardware_bfloat16(cpu_path)
    cpu = torch.device("cpu")
    assert training_dtype(Settings(), cpu) == (torch.bfloat16 if native_bf16 else torch.float32)
    assert training_dtype(Settings(precision="float32"), cpu) == torch.float32
    with pytest.raises(SystemExit, match="precision"):
        training_dtype(Settings(precision="float16"), cpu)


def test_a_training_step_under_bfloat16_autocast_gives_nearly_the_float32_loss():
    """bfloat16 autocast (training_dtype's choice where the CPU has it) changes the rounding, not the
    objective: on a tiny random target, features made and one batch's loss under it stay within 2% of float32's."""
    target = tiny_target()
    data = random_answers(6, seed=1)
    settings = Settings(draft_vocab=128)
    exact_data = with_layers(target, data, ())
    head = new_head(target, "tiny", exact_data, settings, {255})
    with torch.no_grad():
        exact = loss_terms(head, exact_data, settings)
        rounded_data = with_layers(target, data, (), dtype=torch.bfloat16)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            rounded = loss_terms(head, rounded_data, settings)
    assert float(rounded) != float(exact)  # bfloat16 was used
    assert abs(float(rounded) - float(exact)) <= 0.02 * float(exact)


def test_depth_decay_weighs_the_unrolled_depths():
    """depth_decay 1 is the plain mean over depths; a decay near 0 leaves depth 1's loss alone (the loss of a
    depth-1 unroll); 0.8 (EAGLE-3) lies between, weighted toward the first depths."""
    target = tiny_target()
    data = with_layers(target, random_answers(4, seed=2), ())
    settings = Settings(draft_vocab=128, depth=3)
    head = new_head(target, "tiny", data, settings, {255})
    with torch.no_grad():
        by_depth = [float(loss_terms(head, data, replace(settings, depth=d))) * d for d in (1, 2, 3)]  # summed losses
        per_depth = [by_depth[0], by_depth[1] - by_depth[0], by_depth[2] - by_depth[1]]
        assert len(set(per_depth)) == 3  # the depths differ, so the weights matter
        for decay in (1.0, 0.8, 1e-9):
            weights = [decay**s for s in range(3)]
            expected = sum(w * loss for w, loss in zip(weights, per_depth)) / sum(weights)
            assert float(loss_terms(head, data, replace(settings, depth_decay=decay))) == pytest.approx(
                expected, rel=1e-4
            )
        assert float(loss_terms(head, data, replace(settings, depth_decay=1e-9))) == pytest.approx(
            per_depth[0], rel=1e-4
        )


def test_a_run_stopped_between_evaluations_resumes_to_the_same_head(tmp_path, monkeypatch):
    """Checkpoints come every CHECKPOINT_MINUTES between evaluations too (a stopped run loses at most that):
    stopped after every single step and resumed each time, training ends where an uninterrupted run ends."""
    from training import train_head

    target = tiny_target()
    data = with_layers(target, random_answers(30, seed=3), ())
    train_set, heldout_set = data[:24], data[24:]
    settings = Settings(draft_vocab=128, depth=2, epochs=2, batch_tokens=256, lr=3e-3, evals_per_epoch=1)

    def fresh_head():
        torch.manual_seed(0)
        return new_head(target, "tiny", train_set, settings, {255})

    whole = fresh_head()
    expected = train_head.train(whole, train_set, heldout_set, settings, tmp_path / "whole.pt")
    monkeypatch.setattr(train_head, "CHECKPOINT_MINUTES", -1)  # a checkpoint after every step
    calls, curve = 0, []
    while not curve or curve[-1]["epoch"] < settings.epochs:
        head = fresh_head()
        curve = train_head.train(head, train_set, heldout_set, settings, tmp_path / "stopped.pt", max_minutes=-1)
        calls += 1
    assert calls == expected[-1]["step"] > 2 * settings.evals_per_epoch  # it stopped between evaluations
    assert [p["heldout_top1"] for p in curve] == [p["heldout_top1"] for p in expected]
    for mine, theirs in zip(head.parameters(), whole.parameters()):
        torch.testing.assert_close(mine, theirs)

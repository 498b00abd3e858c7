"""Training the draft head: the --smoke run learns and saves a head that loads; the data keeps its split."""

import json
from pathlib import Path

from specdec_core.drafters.eagle import load_head
from training.draft_data import build_prompts
from training.train_head import main, tiny_target

ROOT = Path(__file__).resolve().parents[2]


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

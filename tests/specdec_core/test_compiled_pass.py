"""Compiled passes (compiled_pass.py, compile_jobs.py) against the lean pass on a tiny random model: the same greedy
tokens and near-equal logits for one token and k + 1, after rollbacks, for draft trees with compaction, past the
static length (where the lean pass takes over); a bad package is never loaded; a compiled target's costs are the
ones later runs read."""

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from specdec_core import GenerationConfig, autoregressive, compile_jobs, generated_tokens, speculative
from specdec_core.artefacts import artefact_problem
from specdec_core.compile_jobs import _bring_into_use, compile_state, keep_in_use
from specdec_core.compiled_pass import (
    CompiledPasses,
    PassPlan,
    attach,
    build_packages,
    load_packages,
    model_fingerprint,
)
from specdec_core.cpu_kernels import release_dense_weights
from specdec_core.drafters.ngram import NgramDrafter
from specdec_core.kv_cache import CachedModel
from specdec_core.static_pass import static_inputs
from specdec_core.tree import attention_mask
from specdec_core.tuning import cost_curve, tune_target, tuning_of
from tests.conftest import tiny_llama
from tests.specdec_core.test_lean_pass import lean_copy

ROOT = Path(__file__).resolve().parents[2]
CONTEXT = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5]
LAYERS = (0, 2)  # feature layers the packages output, as an EAGLE head reads them
TOLERANCE = {"rtol": 1e-4, "atol": 1e-4}  # another GEMM kernel: the same sums, rounded otherwise


@pytest.fixture(scope="module")
def stock():
    return tiny_llama(seed=5, vocab_size=48, layers=3, fast=False)


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    before = os.environ.get("SPECDEC_CACHE_DIR")
    os.environ["SPECDEC_CACHE_DIR"] = str(tmp_path_factory.mktemp("specdec-cache"))
    yield
    if before is None:
        del os.environ["SPECDEC_CACHE_DIR"]
    else:
        os.environ["SPECDEC_CACHE_DIR"] = before


@pytest.fixture(scope="module")
def plan(stock, cache_dir) -> PassPlan:
    plan = PassPlan(model_fingerprint(stock), widths=(1, 4), length=32, feature_layers=LAYERS)
    build_packages(stock, plan)
    return plan


@pytest.fixture(scope="module")
def compiled(stock, plan):
    """The served copy (fused, packed, dense weights released) with the compiled passes attached."""
    model = lean_copy(stock)
    attach(model, load_packages(plan))
    return model


@pytest.fixture(scope="module")
def lean(stock):
    return lean_copy(stock)


def both(compiled, lean) -> tuple[CachedModel, CachedModel]:
    ours, theirs = CachedModel(compiled), CachedModel(lean)
    assert ours.compiled is not None and theirs.compiled is None
    return ours, theirs


def test_padding_rows_see_what_the_last_real_row_sees():
    ids, positions, slots, mask = static_inputs([7, 8], cached=3, width=4, length=10)
    assert ids.tolist() == [[7, 8, 8, 8]] and positions.tolist() == [[3, 4, 4, 4]] and slots.tolist() == [3, 4, 5, 6]
    rows = mask[0, 0]
    assert rows[0].tolist() == [True] * 4 + [False] * 6 and rows[1].tolist() == [True] * 5 + [False] * 5
    assert all(rows[r].tolist() == rows[1].tolist() for r in (2, 3))  # never the padding's own slots


def test_a_trees_mask_is_the_trees():
    parents = (-1, -1, 0)
    _, positions, _, mask = static_inputs([4, 5, 6, 7], cached=2, width=4, length=8, parents=parents)
    assert torch.equal(mask[0, 0, :4, :6], attention_mask(parents, 1, 2)[0, 0])
    assert not mask[0, 0, :, 6:].any() and positions.tolist() == [[2, 3, 3, 4]]


@pytest.fixture
def compiled_calls(monkeypatch) -> list[int]:
    """The widths of the compiled packages run, in order: the comparisons hold only if the compiled pass ran."""
    calls, run = [], CompiledPasses.run

    def counted(self, kv, token_ids, cached, parents, width):
        calls.append(width)
        return run(self, kv, token_ids, cached, parents, width)

    monkeypatch.setattr(CompiledPasses, "run", counted)
    return calls


@pytest.mark.parametrize("width", [1, 4])
def test_logits_features_and_tokens_equal_the_lean_pass_after_rollbacks(compiled, lean, width, compiled_calls):
    ours, theirs = both(compiled, lean)
    for cached in (ours, theirs):
        cached.forward(CONTEXT)
        cached.forward([7, 8, 9, 10], logits_to_keep=4)
        cached.rollback(len(CONTEXT) + 1)  # three drafts rejected
    new = [11, 12, 13, 14][:width]
    (a, fa), (b, fb) = (c.forward_with_features(new, LAYERS, logits_to_keep=width) for c in (ours, theirs))
    torch.testing.assert_close(a, b, **TOLERANCE)
    torch.testing.assert_close(fa, fb, **TOLERANCE)
    assert a.argmax(-1).tolist() == b.argmax(-1).tolist()
    assert compiled_calls == [4, width]  # the drafts' pass, then this one
    assert ours.length == theirs.length == len(CONTEXT) + 1 + width


def test_a_draft_tree_then_compaction_matches_the_lean_pass(compiled, lean, compiled_calls):
    parents, rows = (-1, -1, 0), [0, 1, 3]  # the fed token, then the path through nodes 0 and 2
    ours, theirs = both(compiled, lean)
    for cached in (ours, theirs):
        cached.forward(CONTEXT)
    trees = [c.forward([20, 21, 22, 23], logits_to_keep=4, parents=parents) for c in (ours, theirs)]
    torch.testing.assert_close(*trees, **TOLERANCE)
    assert compiled_calls == [4]  # the tree went through the 4-token package
    for cached in (ours, theirs):
        cached.compact(len(CONTEXT), rows)
    nexts = [c.forward([25]) for c in (ours, theirs)]
    torch.testing.assert_close(*nexts, **TOLERANCE)
    assert compiled_calls == [4, 1]


def test_past_the_static_length_the_lean_pass_takes_over(compiled, lean, plan):
    ours, theirs = both(compiled, lean)
    tokens = (CONTEXT * 4)[: plan.length - 2]
    for cached in (ours, theirs):
        cached.forward(tokens)
    assert ours._compiled_width(4, ()) is None and ours._compiled_width(1, ()) == 1
    for token in (30, 31, 32, 33):  # the third and fourth outgrow the buffers
        torch.testing.assert_close(ours.forward([token]), theirs.forward([token]), **TOLERANCE)
    assert ours._compiled_width(1, ()) is None


def test_greedy_speculative_decoding_with_compiled_passes_is_plain_decodings_output(compiled, lean, compiled_calls):
    config = GenerationConfig(max_new_tokens=12)
    prompt = [1, 2, 3, 1, 2, 3, 1, 2]
    plain = generated_tokens(list(autoregressive(lean, prompt, config))[:-1])
    assert generated_tokens(list(autoregressive(compiled, prompt, config))[:-1]) == plain
    assert generated_tokens(list(speculative(compiled, NgramDrafter(), prompt, config))[:-1]) == plain
    assert 1 in compiled_calls and 4 in compiled_calls  # plain steps and verification passes both compiled


def test_a_truncated_package_is_refused(plan):
    path = plan.path(4)
    whole = path.read_bytes()
    path.write_bytes(whole[:-100])
    try:
        assert artefact_problem(path, plan.identity(4)) == "cut short or grown since it was built"
        assert plan.missing() == [4] and load_packages(plan) is None  # never loaded: rebuilt (test_artefacts.py)
    finally:
        path.write_bytes(whole)
    assert plan.missing() == []


def test_a_package_of_another_model_is_not_this_ones(stock, plan):
    other = copy.deepcopy(stock)
    with torch.no_grad():
        other.model.embed_tokens.weight[0, 0] += 1.0
    assert PassPlan(model_fingerprint(other), plan.widths, plan.length, LAYERS).missing() == list(plan.widths)


def test_once_in_use_runs_read_the_compiled_passes_costs(stock, plan, monkeypatch):
    monkeypatch.setenv("SPECDEC_COMPILE", "load")  # the packages are built: load them, build none
    model = lean_copy(stock, release=False)
    lean_tuning = tune_target(model, "tiny-compiled")  # as models.py loads a served model: tuned, then released
    release_dense_weights(model)
    _bring_into_use(model, "tiny-compiled", plan)
    assert compile_state("tiny-compiled").state == "in use"
    tuning = tuning_of("tiny-compiled", torch.float32)
    assert tuning.pass_in_use == "compiled" and lean_tuning.pass_in_use == "lean"
    assert cost_curve(model) is tuning.curve and tuning.curve != lean_tuning.curve
    assert len(tuning.curve.seconds) == len(lean_tuning.curve.seconds)
    assert CachedModel(model).compiled is not None
    assert compile_state("tiny-compiled").detail.startswith("for passes of 1-4 tokens")
    assert keep_in_use(model, "tiny-compiled") is None  # attached already: nothing to do


def test_a_model_loaded_again_takes_the_compiled_passes_again(stock, plan, monkeypatch):
    monkeypatch.setenv("SPECDEC_COMPILE", "load")
    first, again = (lean_copy(stock, release=False) for _ in range(2))
    for model in (first, again):
        tune_target(model, "tiny-reloaded")
        release_dense_weights(model)
    _bring_into_use(first, "tiny-reloaded", plan)
    assert CachedModel(again).compiled is None  # the model cache let `first` go and loaded `again`
    keep_in_use(again, "tiny-reloaded").join()
    assert CachedModel(again).compiled is not None and compile_state("tiny-reloaded").state == "in use"


def served_with(stock, plan, monkeypatch, lean: list[float], compiled: dict[int, float], source: str):
    """A served copy brought into use with these timings in place of the measured ones: which widths the compiled
    passes take is decided from them."""
    monkeypatch.setenv("SPECDEC_COMPILE", "load")
    monkeypatch.setattr(compile_jobs, "paired_timings", lambda model, plan: (lean, compiled))
    model = lean_copy(stock, release=False)
    tune_target(model, source)
    release_dense_weights(model)
    compile_jobs._bring_into_use(model, source, plan)
    return model


def test_the_compiled_passes_run_where_they_are_faster_at_every_width(stock, plan, monkeypatch):
    lean = [0.010] * 3 + [0.011] * 14
    model = served_with(stock, plan, monkeypatch, lean, {1: 0.005, 4: 0.008}, "tiny-every-width")
    assert CachedModel(model).compiled.used_for == {1, 2, 3, 4}  # past the widest package, the lean pass
    assert CachedModel(model)._compiled_width(5, ()) is None
    curve = tuning_of("tiny-every-width", torch.float32).curve
    assert curve.seconds[:4] == (0.005, 0.008, 0.008, 0.008) and curve.seconds[4:] == tuple(lean[4:])
    assert compile_state("tiny-every-width").detail.startswith("for passes of 1-4 tokens")


def test_faster_at_some_widths_only_the_lean_pass_serves(stock, plan, monkeypatch):
    lean = [0.010] * 3 + [0.011] * 14
    model = served_with(stock, plan, monkeypatch, lean, {1: 0.005, 4: 0.012}, "tiny-width-1")
    assert CachedModel(model).compiled is None and compile_state("tiny-width-1").state == "not used"
    assert "faster than the lean pass at 1, not at every width up to 4" in compile_state("tiny-width-1").detail


def test_where_the_compiled_passes_are_slower_the_lean_pass_keeps_serving(stock, plan, monkeypatch):
    model = served_with(stock, plan, monkeypatch, [0.010] * 17, {1: 0.0101, 4: 0.02}, "tiny-slower")
    assert compile_state("tiny-slower").state == "not used" and CachedModel(model).compiled is None
    assert tuning_of("tiny-slower", torch.float32).pass_in_use == "lean"


# The AVX2 path needs a process capped at AVX2 from its start (cpu_kernels.AVX2_CAPS): inductor reads
# ATEN_CPU_CAPABILITY when it picks the instructions it generates.
AVX2_RUN = """
import json, re, sys, zipfile
from specdec_core import GenerationConfig, autoregressive, generated_tokens, speculative
from specdec_core.compiled_pass import PassPlan, attach, build_packages, load_packages, model_fingerprint
from specdec_core.drafters.ngram import NgramDrafter
from specdec_core.machine import this_machine
from tests.conftest import tiny_llama
from tests.specdec_core.test_lean_pass import lean_copy

stock = tiny_llama(seed=5, vocab_size=48, layers=3, fast=False)
plan = PassPlan(model_fingerprint(stock), widths=(4,), length=32)  # one-token passes padded to four
build_packages(stock, plan)
compiled, lean = lean_copy(stock), lean_copy(stock)
attach(compiled, load_packages(plan))
config, prompt = GenerationConfig(max_new_tokens=12), [1, 2, 3, 1, 2, 3, 1, 2]
plain = generated_tokens(list(autoregressive(lean, prompt, config))[:-1])
fast = generated_tokens(list(speculative(compiled, NgramDrafter(), prompt, config))[:-1])
sources = [zipfile.ZipFile(plan.path(w)).read(n).decode() for w in plan.widths
           for n in zipfile.ZipFile(plan.path(w)).namelist() if n.endswith(".cpp")]
isas = sorted({m for text in sources for m in re.findall(r"CPU_CAPABILITY_[A-Z0-9]+", text)})
print(json.dumps({"kernel_isa": this_machine().kernel_isa, "generated": isas, "identical": plain == fast}))
"""


def test_on_the_avx2_path_compiled_passes_are_generated_for_avx2_and_keep_the_tokens(tmp_path):
    env = {**os.environ, "SPECDEC_FORCE_AVX2": "1", "SPECDEC_CACHE_DIR": str(tmp_path), "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", AVX2_RUN], env=env, cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result == {"kernel_isa": "AVX2", "generated": ["CPU_CAPABILITY_AVX2"], "identical": True}

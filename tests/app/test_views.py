"""Event-to-view functions on real events from the core (tiny models, a word-level tokenizer)."""

import re
from dataclasses import replace

import plotly.graph_objects as go
import pytest

from app import race_charts, views
from app.race import PLAIN, SPEC, Race, interleave
from specdec_core import (
    GenerationConfig,
    ModelDrafter,
    SamplingConfig,
    SpecStep,
    autoregressive,
    speculative,
)
from specdec_core.costs import CostCurve
from specdec_core.cpu_kernels import MKL_PACKED, PACKED, STOCK, KernelPlan
from specdec_core.events import ARGMAX_MATCH, HEAD, LOOKUP
from specdec_core.tuning import KERNEL_WIDTHS, Choice, TargetTuning, kernel_key
from tests.conftest import word_tokenizer

PROMPT = [0, 5, 9, 5, 9, 5, 3, 7, 5, 9]
WORDS = ["<b>", "&amp;", '"q"', "<script>alert(1)</script>"] + [f"w{i}" for i in range(27)]


@pytest.fixture(scope="module")
def race(target_model, draft_model) -> Race:
    config = GenerationConfig(max_new_tokens=40)
    race = Race(greedy=True, k=4)
    runs = {
        PLAIN: autoregressive(target_model, PROMPT, config),
        SPEC: speculative(target_model, ModelDrafter(draft_model), PROMPT, config),
    }
    for side, event in interleave(runs):
        race.add(side, event)
    return race


@pytest.fixture(scope="module")
def text() -> views.TokenText:
    return views.TokenText(word_tokenizer(WORDS))


def test_speculative_pane_colours_every_outcome_with_refused_drafts_inline(race, text):
    pane = views.pane_html("speculative", race.spec, text, running=False, inline_rejected=True)
    classes = re.findall(r'class="tok tok-(\w+)[ "]', pane)
    steps = race.spec_steps
    assert classes.count("accepted") == sum(s.accepted_count for s in steps)
    assert classes.count("rejected") == sum(s.rejected_count for s in steps)
    assert classes.count("correction") == sum(1 for s in steps if s.rejected_token is not None)
    assert classes.count("bonus") == sum(1 for s in steps if s.rejected_token is None)
    assert "argmax match: yes" in pane and "argmax match: no" in pane and "target p=" in pane


def test_pane_reads_as_the_output_with_one_marker_per_step_of_refused_drafts(race, text):
    pane = views.pane_html("speculative", race.spec, text, running=False)
    steps = [s for s in race.spec_steps if s.rejected_count]
    assert steps and "tok-rejected" not in pane
    markers = re.findall(
        r'class="tok tok-marker" data-refused="(\d+)" title="(\d+) refused drafts: ([^"]*)"></span>', pane
    )
    assert [(int(a), int(b)) for a, b, _ in markers] == [(s.rejected_count, s.rejected_count) for s in steps]
    visible = re.sub(r'<span class="tok tok-marker"[^>]*></span>', "", pane)
    tokens = re.findall(r'class="tok tok-(?:accepted|correction|bonus|target)[ "]', visible)
    assert len(tokens) == race.spec.token_count  # what remains is exactly the output


def test_tree_view_draws_a_chain_as_one_branch_and_a_tree_with_siblings(race, text):
    chain_step = next(s for s in race.spec_steps if s.rejected_count)
    fig = race_charts.tree_figure(chain_step, text, 0, 1)
    names = {t.name for t in fig.data if t.name}
    assert "accepted" in names or chain_step.accepted_count == 0
    drawn = sum(len(t.x) for t in fig.data if t.name in ("accepted", "rejected", "unverified"))
    assert drawn == chain_step.drafted_count
    tree_step = SpecStep(
        draft_tokens=(5, 6, 7, 8, 9),
        parents=(-1, -1, 0, 0, 1),
        path=(1, 4),
        draft_probs=(0.5, 0.3, 0.4, 0.2, 0.9),
        target_probs=(0.1, 0.8, 0.2, 0.1, 0.9),
        accept_probs=(0, 1, 0, 0, 1),
        rule=ARGMAX_MATCH,
        sources=(LOOKUP, HEAD, HEAD, HEAD, HEAD),
        judgements=(),
        next_token=3,
        next_token_prob=0.7,
        emitted_tokens=(6, 9, 3),
        draft_passes=2,
        draft_seconds=0.01,
        verify_seconds=0.05,
    )
    fig = race_charts.tree_figure(tree_step, text, 2, 5)
    groups = {t.name: len(t.x) for t in fig.data if t.name in ("accepted", "rejected", "unverified")}
    assert groups == {"accepted": 2, "rejected": 1, "unverified": 2}  # node 0 refused; its children never reached
    assert (
        "bonus" in {t.name for t in fig.data}
        and "argmax match: yes" in next(t for t in fig.data if t.name == "accepted").hovertext[0]
    )
    assert race_charts.tree_figure(None, text).layout.annotations  # before any draft: a note, not an error


def test_model_text_is_escaped(race, text):
    """No markup from a token reaches the page: the tokenizer's vocabulary holds <script> and <b>."""
    pane = views.pane_html("speculative", race.spec, text, running=False) + views.pane_html(
        "target only", race.plain, text, False
    )
    assert "<script>" not in pane and "<b>" not in pane.replace("<b>speculative</b>", "").replace(
        "<b>target only</b>", ""
    )
    raw = views.TokenText(word_tokenizer(WORDS))
    span = next(views.step_spans(race.plain.steps[0], raw))
    assert "<" not in re.sub(r"^<span[^>]*>|</span>$", "", span)


def test_summary_reports_identity_and_passes_saved(race):
    html = views.summary_html(race)
    assert race.identical is True
    assert "✔ identical" in html
    saved = race.plain.summary.target_passes - race.spec.summary.target_passes
    assert f"({saved:+d} saved)" in html
    assert f"{race.speedup:.2f}×" in html
    first_position = sum(s.accepted_count >= 1 for s in race.spec_steps) / len(race.spec_steps)
    assert f"by draft depth 1, 2, … (the path reached it)</th><td></td><td>{100 * first_position:.0f}%" in html


def test_race_interleaves_by_own_clock(race):
    assert race.plain.summary.tokens == race.spec.summary.tokens == 40
    assert race.plain.clock == pytest.approx(race.plain.summary.seconds)
    assert race.spec.clock == pytest.approx(race.spec.summary.seconds)


def test_race_chart_has_all_four_panels(race):
    fig = race_charts.race_figure(race)
    assert isinstance(fig, go.Figure)
    names = {(t.type, t.xaxis) for t in fig.data}
    assert {"x", "x2", "x3", "x4"} <= {axis for _, axis in names}
    histogram = [t for t in fig.data if t.xaxis == "x2"][0]
    assert sum(histogram.y) == len(race.spec_steps)


def test_a_step_whose_answer_ends_inside_its_path_shows_only_what_was_emitted(text):
    # path 0 -> 1 -> 2 accepted, but node 1 is the end token: the output keeps nodes 0 and 1 and nothing after
    end = 7
    step = SpecStep(
        draft_tokens=(5, end, 8, 9),
        parents=(-1, 0, 1, 0),
        path=(0, 1, 2),
        draft_probs=(0.9, 0.8, 0.7, 0.1),
        target_probs=(0.9, 0.9, 0.6, 0.05),
        accept_probs=(1, 1, 1, 0),
        rule=ARGMAX_MATCH,
        sources=(HEAD,) * 4,
        judgements=(),
        next_token=3,
        next_token_prob=0.4,
        emitted_tokens=(5, end),
        draft_passes=3,
        draft_seconds=0.01,
        verify_seconds=0.05,
    )
    assert step.emitted_path == (0, 1) and step.accepted_after_end == (2,) and not step.next_emitted
    fig = race_charts.tree_figure(step, text, 0, 1)
    groups = {t.name: len(t.x) for t in fig.data if t.name}
    assert groups["accepted"] == 2 and groups[views.AFTER_END] == 1 and groups["rejected"] == 1
    assert not {"bonus", "correction"} & set(groups)  # the target's own token never reached the output
    assert "the answer ended at the end token, depth 2" in fig.layout.title.text
    detail = views.step_detail_html(step, 0, 1, text)
    assert views.AFTER_END in detail and "not emitted: the answer had ended" in detail
    spans = "".join(views.step_spans(step, text))
    assert len(re.findall(r'class="tok tok-accepted[ "]', spans)) == 2 and "tok-bonus" not in spans


def test_step_detail_lists_each_draft(race, text):
    step = next(s for s in race.spec_steps if s.rejected_token is not None)
    html = views.step_detail_html(step, 0, len(race.spec_steps), text)
    assert html.count("<tr>") == step.drafted_count + 2  # header, drafts, the target's token
    assert "rejected" in html and "correction" in html


def test_sampling_race_makes_no_identity_claim(target_model, draft_model, text):
    config = GenerationConfig(max_new_tokens=20, sampling=SamplingConfig(temperature=1.0, seed=1))
    race = Race(greedy=False, k=4)
    runs = {
        PLAIN: autoregressive(target_model, PROMPT, config),
        SPEC: speculative(target_model, ModelDrafter(draft_model), PROMPT, config),
    }
    for side, event in interleave(runs):
        race.add(side, event)
    assert race.identical is None
    assert "n/a: sampling keeps the distribution" in views.summary_html(race)


def test_kernel_table_times_each_width_and_bolds_the_kernel_its_plan_runs():
    # the Intel Xeon's: stock for 1-3 tokens, MKL's packed GEMM for 4-8, oneDNN's from 9
    plan = KernelPlan(STOCK, PACKED, (), (STOCK, STOCK, MKL_PACKED, MKL_PACKED, MKL_PACKED, MKL_PACKED, MKL_PACKED))
    base = {STOCK: 0.040, MKL_PACKED: 0.060, PACKED: 0.080}
    seconds = {
        kernel_key(kernel, width): base[kernel] + width / 1000
        for kernel in base
        for width in range(1, KERNEL_WIDTHS + 1)
    }
    tuning = TargetTuning(plan, Choice("target linears", plan.describe(17), seconds), CostCurve((0.04,)))
    table = views.kernel_table(tuning)
    assert "| tokens a pass | packed (oneDNN) | stock (F.linear) | packed (MKL) |" in table
    rows = [row for row in table if row.startswith("| ") and row[2].isdigit()]
    assert len(rows) == KERNEL_WIDTHS and all(row.count("|") == 5 for row in rows)
    bold = [re.findall(r"\*\*([\d.]+) ms\*\*", row) for row in rows]
    assert bold == [["41.0"], ["42.0"], ["43.0"], ["64.0"], ["65.0"], ["66.0"], ["67.0"], ["68.0"], ["89.0"]]
    two_timed = {key: s for key, s in seconds.items() if not key.startswith(MKL_PACKED)}  # a CPU without MKL
    assert all(
        row.count("|") == 4 for row in views.kernel_table(replace(tuning, kernels=Choice("t", "", two_timed)))[3:-1]
    )
    nothing_timed = TargetTuning(KernelPlan(), Choice("target linears", "packed", {}), CostCurve((0.04,)))
    assert views.kernel_table(nothing_timed) == []

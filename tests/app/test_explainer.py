"""The Explainer tab: its lesson path and accordions, the tree's defaults, the last race's star on its own curve,
the cost and learning-curve charts, the head's account."""

import re
from dataclasses import replace
from types import SimpleNamespace

import gradio as gr
import pytest

from app import explainer_charts, explainer_handlers, rule_charts, views
from app.explainer import (
    DEFINITIONS,
    head_intro,
    head_realistic_agreement,
    head_training,
    race_point_text,
    tree_agreement,
)
from app.explainer_point import fit, race_point
from app.race import PLAIN, SPEC, Race, interleave
from specdec_core import (
    DraftConfig,
    Finished,
    GenerationConfig,
    ModelDrafter,
    PlainStep,
    autoregressive,
    expected_speedup,
    speculative,
)
from specdec_core.costs import CostCurve
from specdec_core.cpu_kernels import PACKED, STOCK, KernelPlan
from specdec_core.stats import summarize
from specdec_core.tuning import KERNEL_WIDTHS, Choice, TargetTuning, kernel_key
from tests.conftest import word_tokenizer

PROMPT = [0, 5, 9, 5, 9, 5, 3, 7, 5, 9]
# A CPU whose wide passes are dear: T(n)/T(1) = 1 + 0.1 (n - 1).
STEEP = CostCurve(tuple(0.05 * (1 + 0.1 * n) for n in range(17)))


def raced(runs: dict, k: int) -> Race:
    race = Race(greedy=True, k=k)
    for side, event in interleave(runs):
        race.add(side, event)
    return race


@pytest.fixture(scope="module")
def race(target_model, draft_model) -> Race:
    config = GenerationConfig(max_new_tokens=40)
    return raced(
        {
            PLAIN: autoregressive(target_model, PROMPT, config),
            SPEC: speculative(target_model, ModelDrafter(draft_model), PROMPT, config),
        },
        k=4,
    )


@pytest.fixture(scope="module")
def deep_race(target_model, draft_model) -> Race:
    """Like a hybrid's race: drafts 8 deep while the UI says k = 3, plain steps among the speculative ones (adaptive
    k), and the steps' seconds set by hand: plain passes 50 ms, a verification priced by STEEP, drafting 2 ms a
    pass, every other step's verification 20% dearer (a busy moment)."""
    config = GenerationConfig(max_new_tokens=60)
    plain = list(autoregressive(target_model, PROMPT, config))
    spec = list(speculative(target_model, ModelDrafter(draft_model), PROMPT, config, DraftConfig(k=8)))
    plain_steps = [replace(step, seconds=0.2 if i == 0 else 0.05) for i, step in enumerate(plain[:-1])]
    spec_steps = []
    for i, step in enumerate(spec[:-1]):
        if isinstance(step, PlainStep):
            spec_steps.append(replace(step, seconds=0.2))
            continue
        busy = 1.2 if i % 2 else 1.0
        spec_steps.append(
            replace(
                step,
                draft_seconds=0.002 * step.draft_passes,
                verify_seconds=0.05 * busy * STEEP.ratio(step.drafted_count + 1),
            )
        )
        if i % 3 == 0:  # adaptive k chose a plain step here
            spec_steps.append(replace(plain_steps[1], emitted_tokens=step.emitted_tokens[:1]))
    race = Race(greedy=True, k=3)
    for side, steps in ((PLAIN, plain_steps), (SPEC, spec_steps)):
        for step in steps:
            race.add(side, step)
        race.add(side, Finished(summarize(steps, "max_new_tokens")))
    return race


@pytest.fixture(scope="module")
def page() -> gr.Blocks:
    from app.ui import build_ui

    return build_ui()


def by_id(page: gr.Blocks, elem_id: str):
    return next(block for block in page.blocks.values() if getattr(block, "elem_id", None) == elem_id)


def in_page_order(page: gr.Blocks) -> list:
    """The blocks as the layout holds them, depth first."""
    return list(_descendants(page))


def inside(page: gr.Blocks, block) -> list[gr.Accordion]:
    """The accordions that hold a block."""
    return [
        parent
        for parent in page.blocks.values()
        if isinstance(parent, gr.Accordion) and block in list(_descendants(parent))
    ]


def _descendants(block):
    for child in getattr(block, "children", []):
        yield child
        yield from _descendants(child)


def test_the_explainer_reads_as_a_lesson_path_with_details_in_closed_accordions(page):
    texts = [block.value for block in in_page_order(page) if isinstance(block, gr.Markdown) and block.value]
    sections = [
        "### 1. What speculative decoding is",
        "### 2. Why the output is exactly the target's",
        "### 3. When it pays",
        "### 4. This machine's costs",
        "### 5. Your last race, step by step",
    ]
    where = [next(i for i, text in enumerate(texts) if section in text) for section in sections]
    assert where == sorted(where)
    kernels, head = inside(page, by_id(page, "kernel-table")), inside(page, by_id(page, "head-curve"))
    assert len(kernels) == 1 and kernels[0].open is False and "Kernel" in kernels[0].label
    assert len(head) == 1 and head[0].open is False and "draft head" in head[0].label
    head_text = next(block for block in head[0].children if isinstance(block, gr.Markdown)).value
    assert "answer tokens seen" in head_text
    for teaching in ("machine-costs", "cost-curve", "theory-chart", "tree-theory", "definitions"):
        assert not inside(page, by_id(page, teaching))


def test_the_rule_picture_sits_under_why_the_output_is_exact_and_follows_the_step_slider(page, race, monkeypatch):
    order = in_page_order(page)
    picture = by_id(page, "explainer-rule-picture")
    why = next(b for b in order if isinstance(b, gr.Markdown) and "### 2. Why the output" in (b.value or ""))
    pays = next(b for b in order if isinstance(b, gr.Markdown) and "### 3. When it pays" in (b.value or ""))
    assert order.index(why) < order.index(picture) < order.index(pays)
    wired = [f for f in page.fns.values() if f.fn is explainer_handlers.rule_view]
    assert wired and all(f.outputs == [picture] and f.inputs[0].label == "Step of the last race" for f in wired)
    monkeypatch.setattr(explainer_handlers, "load_model", lambda target: SimpleNamespace(tokenizer=word_tokenizer([])))
    last = {"race": race, "target": "tiny"}
    step = race.spec_steps[1]
    expected = rule_charts.rule_figure(step, views.TokenText(word_tokenizer([])))
    assert explainer_handlers.rule_view(2, last).layout.meta == expected.layout.meta
    assert explainer_handlers.rule_view(1, None).layout.annotations  # before a race: a note


def test_the_kernel_table_goes_to_its_accordion_and_the_curve_stays_in_the_lesson(monkeypatch):
    plan = KernelPlan(STOCK, PACKED, (), (STOCK,) * 7)
    seconds = {kernel_key(k, w): 0.04 + w / 1000 for k in (STOCK, PACKED) for w in range(1, KERNEL_WIDTHS + 1)}
    tuning = TargetTuning(plan, Choice("target linears", plan.describe(17), seconds), STEEP)
    monkeypatch.setattr(explainer_handlers, "tuning_of", lambda target, dtype: tuning)
    machine, kernels, figure = explainer_handlers.machine_view(None)
    assert "| tokens a pass | packed (oneDNN) | stock (F.linear) |" in kernels and "target linears" in kernels
    assert "| tokens a pass" not in machine and "T(5)/T(1)" in machine
    assert "the pass that runs, whose costs these are: the lean pass" in machine and "run eagerly" in machine
    assert list(figure.data[0].y) == pytest.approx(STEEP.ratios)
    other = TargetTuning(plan, tuning.kernels, STEEP, "transformers")
    monkeypatch.setattr(explainer_handlers, "tuning_of", lambda target, dtype: other)
    assert (
        "the pass that runs, whose costs these are: transformers' own forward"
        in explainer_handlers.machine_view(None)[0]
    )


def test_the_trees_agreement_starts_and_stays_at_or_above_the_chains(page):
    chain, tree = by_id(page, "chain-agreement").value, by_id(page, "tree-agreement").value
    assert tree >= chain and tree == tree_agreement(chain)
    assert all(tree_agreement(a / 100) >= a / 100 for a in range(100))
    assert explainer_handlers.raised_tree_agreement(0.95, tree) == tree_agreement(0.95) >= 0.95
    assert explainer_handlers.raised_tree_agreement(0.5, tree) == gr.skip()  # above a already: left as set
    fig = explainer_charts.chain_vs_tree_figure(0.9, 0.5, 3, 0.05, STEEP)
    chain_tokens, tree_tokens = fig.data[0], fig.data[2]
    assert "drawn at a" in tree_tokens.name and list(tree_tokens.y) == pytest.approx(list(chain_tokens.y))


def test_the_star_is_the_races_measured_speedup_from_tokens_per_pass_and_the_cost_of_a_pass(deep_race):
    point = race_point(deep_race)
    summary = deep_race.spec.summary
    assert point.tokens_per_pass == pytest.approx(summary.mean_accepted_length)
    assert point.speedup == pytest.approx(deep_race.speedup)
    assert point.target_passes == summary.target_passes > point.speculative_steps == len(deep_race.spec_steps)
    assert point.k > deep_race.k  # drafted deeper than the UI's k says
    plain_per_token = deep_race.plain.clock / deep_race.plain.token_count
    assert point.pass_cost == pytest.approx(deep_race.spec.clock / summary.target_passes / plain_per_token)


@pytest.mark.parametrize("curve", [None, STEEP], ids=["ideal", "measured curve"])
def test_my_last_races_a_c_and_k_give_a_curve_through_its_star(deep_race, curve):
    fitted = fit(race_point(deep_race), curve)
    fig = explainer_charts.theory_figure(fitted.a, fitted.c, fitted.k, deep_race, curve)
    star = next(t for t in fig.data if t.marker.symbol == "star")
    sliders = fig.data[1 if curve else 0]  # the sliders' curve: with this machine's T where measured
    race_curve = next(t for t in fig.data if t.line.dash == "dash")
    x = star.x[0]
    assert x == fitted.k and star.y[0] == pytest.approx(deep_race.speedup)
    assert sliders.y[x] == pytest.approx(star.y[0], rel=0.02)
    assert race_curve.y[x] == pytest.approx(star.y[0], rel=0.02)
    # the race's own a (per drafted node), c and UI k put its curve elsewhere: why the star is placed by measurement
    old = expected_speedup(deep_race.acceptance_rate, deep_race.k, deep_race.c, curve.ratio(4) if curve else 1.0)
    assert abs(old - star.y[0]) > 0.05 * star.y[0]


def test_passes_cheaper_than_the_curve_fit_c_at_zero_and_still_meet_the_star(deep_race):
    dear = CostCurve(tuple(0.05 * (1 + 0.5 * n) for n in range(17)))  # dearer than any pass this race took
    point = race_point(deep_race)
    fitted = fit(point, dear)
    assert fitted.cheap_passes and fitted.c == 0
    assert expected_speedup(fitted.a, fitted.k, fitted.c, dear.ratio(fitted.k + 1)) == pytest.approx(
        point.speedup, rel=0.02
    )
    text = race_point_text(point, fitted, deep_race.acceptance_rate, deep_race.k)
    assert "$c$ is 0" in text


def test_the_star_and_the_steps_are_explained_in_the_races_own_numbers(page, deep_race):
    definitions = by_id(page, "definitions").value
    assert definitions == DEFINITIONS.strip()
    for term in (
        "Acceptance per drafted node",
        "Accepted tokens per target pass",
        "Speculative steps and target passes",
        "plain steps",
        "adaptive $k$",
        "mean draft depth",
    ):
        assert term in definitions
    point, fitted = race_point(deep_race), fit(race_point(deep_race), None)
    text = race_point_text(point, fitted, deep_race.acceptance_rate, deep_race.k)
    plain_steps = point.target_passes - point.speculative_steps
    assert f"{point.target_passes} target passes = {point.speculative_steps} speculative steps + {plain_steps}" in text
    assert f"= {deep_race.speedup:.2f}×" in text and f"$k$ = {fitted.k}" in text and "$c$ is 0" not in text
    slider = explainer_handlers.step_slider({"race": deep_race, "target": "t"})
    assert slider.maximum == point.speculative_steps
    assert f"{point.speculative_steps} speculative steps of {point.target_passes} target passes" in slider.info


def test_theory_chart_plots_the_measured_point(race):
    fig = explainer_charts.theory_figure(0.8, 0.2, 4, race, None)
    stars = [t for t in fig.data if t.marker and t.marker.symbol == "star"]
    assert stars and stars[0].y[0] == pytest.approx(race.speedup)
    assert len(fig.data) == 4  # ideal line, your k, last race's line, the star: no curve line without a curve


def test_theory_chart_with_a_measured_cost_curve_lies_below_the_ideal(race):
    fig = explainer_charts.theory_figure(0.8, 0.2, 4, race, STEEP)
    ideal, measured = fig.data[0], fig.data[1]
    assert measured.y[0] == pytest.approx(ideal.y[0])  # k = 0: plain decoding either way
    assert all(m < i for m, i in zip(measured.y[1:], ideal.y[1:]))
    assert measured.y[4] == pytest.approx(expected_speedup(0.8, 4, 0.2, STEEP.ratio(5)))


def test_cost_curve_chart_plots_every_width():
    fig = explainer_charts.cost_curve_figure(STEEP)
    assert list(fig.data[0].x) == list(range(1, 18)) and fig.data[0].y[0] == 1.0
    assert len(fig.data) == 2  # the short curve and the ideal: no long curve was measured


def test_cost_curve_chart_draws_the_long_context_curve_where_measured():
    short = tuple(0.05 * (1 + 0.1 * n) for n in range(17))
    fig = explainer_charts.cost_curve_figure(CostCurve(short, tuple(0.06 * (1 + 0.2 * n) for n in range(17))))
    assert len(fig.data) == 3 and "1,024" in fig.data[1].name
    assert fig.data[1].y[-1] > fig.data[0].y[-1]  # wide passes dearer behind the long context


def test_the_learning_curve_marks_where_training_moved_to_another_corpus():
    """Points after the move are measured on the new corpus's held-out conversations: a dotted line says so at
    the tokens seen when the move came, and none is drawn while every run read the same corpus."""
    curve = [{"epoch": e, "train_tokens": 1000 * e, "heldout_top1": [0.1 * e, 0.1 * e]} for e in (1.0, 2.0, 2.5, 3.0)]
    runs = [{"corpus": "data/a", "epochs": 1}, {"corpus": "data/a", "epochs": 1}, {"corpus": "data/b", "epochs": 1}]
    fig = explainer_charts.learning_curve_figure(curve, runs)
    assert [shape.x0 for shape in fig.layout.shapes] == [2000]
    assert "data/b" in fig.layout.annotations[0].text
    assert not explainer_charts.learning_curve_figure(
        curve, runs[:2] + [{"corpus": "data/a", "epochs": 1}]
    ).layout.shapes
    assert len(fig.data) == 2 and not explainer_charts.learning_curve_figure(curve).layout.shapes


def test_head_intro_states_the_training_its_curve_records_and_the_agreement_saved_beside_it():
    """The explainer's account of the head names the answer tokens and epochs of the shipped head's own curve, the
    corpora its runs read, and its weakest and strongest categories from the agreement measured beside it (none
    typed in by hand)."""
    curve = [{"train_tokens": 4_500_000, "epoch": 4.0}]
    assert "4.50M answer tokens seen over 4 epochs;" in head_intro(curve, {})
    runs = [{"corpus": "data/a", "epochs": 2}, {"corpus": "data/a", "epochs": 1}, {"corpus": "data/b", "epochs": 1}]
    assert "over 4 epochs (3 over `data/a`, 1 over `data/b`)" in head_intro(curve, {}, runs)
    measured = {"translation": [0.204, 0.3], "code_edit": [0.7, 0.6], "writing": [0.5, 0.4], "all": [0.451, 0.4]}
    text = head_intro(curve, measured)
    assert "20% (translation) to 70% (code edit) of the time by category (0.45 over all)" in text
    assert "guesses the first token" not in head_intro(curve, {}) and "n-gram lookup adds the copies" in head_intro(
        curve, {}
    )
    shipped = head_realistic_agreement()
    assert shipped["all"] and all(0 < v[0] < 1 for v in shipped.values())
    weakest = min((v[0], c) for c, v in shipped.items() if c != "all")
    shipped_curve, shipped_runs = head_training()
    shipped_text = head_intro(shipped_curve, shipped, shipped_runs)
    assert re.search(r"\d\.\d\dM answer tokens seen over \d+ epochs \(\d+ over `data/draft-corpus`", shipped_text)
    assert f"{weakest[0]:.0%} ({weakest[1].replace('_', ' ')})" in shipped_text

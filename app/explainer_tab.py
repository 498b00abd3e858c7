"""The Explainer tab's layout and wiring, as a lesson path: what speculative decoding is, why the output is exact,
when it pays, this machine's costs, the last race step by step; the kernel timings and the head's training apart,
in closed accordions."""

from __future__ import annotations

import gradio as gr

from . import explainer_charts, explainer_handlers
from .explainer import (
    CHAIN_AGREEMENT,
    DEFINITIONS,
    HEADLINES,
    MACHINE_INTRO,
    NO_RACE_YET,
    STEP_INTRO,
    TREE_INTRO,
    WHAT_IT_IS,
    WHEN_IT_PAYS,
    WHY_EXACT,
    head_intro,
    head_realistic_agreement,
    head_training,
    tree_agreement,
)
from .explainer_point import A_MAX, C_MAX

LATEX = [{"left": "$$", "right": "$$", "display": True}, {"left": "$", "right": "$", "display": False}]
PRIVATE = dict(api_visibility="private")


def explainer_tab(last_race: gr.State, tab: gr.Tab) -> None:
    gr.Markdown(WHAT_IT_IS, latex_delimiters=LATEX)
    gr.Markdown(WHY_EXACT, latex_delimiters=LATEX)
    rule_picture = gr.Plot(
        label="The rule at one step of your last race (pick the step in section 5)", elem_id="explainer-rule-picture"
    )
    theory, race_point, a, c, k, use_last = _when_it_pays()
    tree_theory, top_width, width = _chains_and_trees()
    machine, kernels, cost_plot = _machine_costs()
    step, step_html = _step_through()
    _head_training()

    sliders = [a, c, k]
    for slider in sliders:
        slider.change(explainer_handlers.theory_view, sliders + [last_race], theory, show_progress="hidden", **PRIVATE)
    tree_inputs = [a, top_width, width, c, last_race]
    for slider in (a, c, top_width, width):
        slider.change(explainer_handlers.tree_theory_view, tree_inputs, tree_theory, show_progress="hidden", **PRIVATE)
    a.change(explainer_handlers.raised_tree_agreement, [a, top_width], top_width, show_progress="hidden", **PRIVATE)
    use_last.click(explainer_handlers.measured_values, last_race, sliders, **PRIVATE).then(
        explainer_handlers.theory_view, sliders + [last_race], theory, **PRIVATE
    )
    tab.select(explainer_handlers.step_slider, last_race, step, **PRIVATE).then(
        explainer_handlers.step_view, [step, last_race], step_html, **PRIVATE
    ).then(explainer_handlers.rule_view, [step, last_race], rule_picture, **PRIVATE).then(
        explainer_handlers.theory_view, sliders + [last_race], theory, **PRIVATE
    ).then(explainer_handlers.race_point_view, last_race, race_point, **PRIVATE).then(
        explainer_handlers.machine_view, last_race, [machine, kernels, cost_plot], **PRIVATE
    ).then(explainer_handlers.tree_theory_view, tree_inputs, tree_theory, **PRIVATE)
    step.change(explainer_handlers.step_view, [step, last_race], step_html, show_progress="hidden", **PRIVATE)
    step.change(explainer_handlers.rule_view, [step, last_race], rule_picture, show_progress="hidden", **PRIVATE)


def _when_it_pays() -> tuple[gr.Plot, gr.Markdown, gr.Slider, gr.Slider, gr.Slider, gr.Button]:
    """Section 3: the formula, its chart with the last race's star, and what each measured number means."""
    gr.Markdown(WHEN_IT_PAYS, latex_delimiters=LATEX)
    with gr.Row():
        with gr.Column(scale=1):
            a = gr.Slider(
                0.0, A_MAX, value=CHAIN_AGREEMENT, step=0.001, label="Acceptance rate a", elem_id="chain-agreement"
            )
            c = gr.Slider(0.0, C_MAX, value=0.2, step=0.001, label="c: one draft pass over one target pass")
            k = gr.Slider(1, 16, value=4, step=1, label="Draft length k")
            use_last = gr.Button("Use my last race's a, c and k")
        with gr.Column(scale=2):
            theory = gr.Plot(label="Expected speedup vs k", elem_id="theory-chart")
    race_point = gr.Markdown(NO_RACE_YET, latex_delimiters=LATEX, elem_id="race-point")
    gr.Markdown(DEFINITIONS, latex_delimiters=LATEX, elem_id="definitions")
    gr.Markdown(HEADLINES)
    return theory, race_point, a, c, k, use_last


def _chains_and_trees() -> tuple[gr.Plot, gr.Slider, gr.Slider]:
    gr.Markdown(TREE_INTRO, latex_delimiters=LATEX)
    with gr.Row():
        with gr.Column(scale=1):
            top_width = gr.Slider(
                0.0,
                A_MAX,
                value=tree_agreement(CHAIN_AGREEMENT),
                step=0.01,
                label="Agreement of the best of the tree's guesses per level",
                info="top-3 for a tree of 3 per level, never below the chain's a (raised when a passes it)",
                elem_id="tree-agreement",
            )
            width = gr.Slider(2, 4, value=3, step=1, label="Guesses per level")
        with gr.Column(scale=2):
            tree_theory = gr.Plot(label="Chain against tree, with this machine's cost curve", elem_id="tree-theory")
    return tree_theory, top_width, width


def _machine_costs() -> tuple[gr.Markdown, gr.Markdown, gr.Plot]:
    """Section 4: the verification curve and each drafter's c; the kernels' timings by width behind an accordion."""
    gr.Markdown(MACHINE_INTRO, latex_delimiters=LATEX)
    machine = gr.Markdown(elem_id="machine-costs")
    cost_plot = gr.Plot(label="Verification cost curve, measured here", elem_id="cost-curve")
    with gr.Accordion("Kernel timings by pass width", open=False, elem_id="kernel-accordion"):
        kernels = gr.Markdown(elem_id="kernel-table")
    return machine, kernels, cost_plot


def _step_through() -> tuple[gr.Slider, gr.HTML]:
    """Section 5: the last race's speculative steps, one at a time."""
    gr.Markdown(STEP_INTRO)
    with gr.Row():
        previous = gr.Button("◀ previous step", size="sm")
        step = gr.Slider(1, 2, value=1, step=1, label="Step of the last race", interactive=False)
        following = gr.Button("next step ▶", size="sm")
    step_html = gr.HTML()
    previous.click(lambda i: max(1, int(i) - 1), step, step, **PRIVATE)
    following.click(lambda i: int(i) + 1, step, step, **PRIVATE)
    return step, step_html


def _head_training() -> None:
    """The embedded model's draft head: how it was trained and its learning curve, behind an accordion."""
    curve, recipe = head_training()
    if not curve:
        return
    with gr.Accordion("The draft head: how it was trained", open=False, elem_id="head-accordion"):
        gr.Markdown(head_intro(curve, head_realistic_agreement(), recipe))
        gr.Plot(
            explainer_charts.learning_curve_figure(curve, recipe),
            label="Draft head: held-out agreement while training",
            elem_id="head-curve",
        )

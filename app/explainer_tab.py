"""The Explainer tab's layout and wiring: the theory, this machine's costs, the head, the step-through."""

from __future__ import annotations

import gradio as gr

from . import explainer_charts, explainer_handlers
from .explainer import (
    HEADLINES,
    INTRO,
    MACHINE_INTRO,
    STEP_INTRO,
    TREE_INTRO,
    head_intro,
    head_realistic_agreement,
    head_training,
)

LATEX = [{"left": "$$", "right": "$$", "display": True}, {"left": "$", "right": "$", "display": False}]


def explainer_tab(last_race: gr.State, tab: gr.Tab) -> None:
    gr.Markdown(INTRO, latex_delimiters=LATEX)
    with gr.Row():
        with gr.Column(scale=1):
            a = gr.Slider(0.0, 0.99, value=0.8, step=0.01, label="Acceptance rate a")
            c = gr.Slider(0.0, 1.5, value=0.2, step=0.01, label="c: one draft pass over one target pass")
            k = gr.Slider(1, 16, value=4, step=1, label="Draft length k")
            use_last = gr.Button("Use my last race's a, c and k")
        with gr.Column(scale=2):
            theory = gr.Plot(label="Expected speedup vs k", elem_id="theory-chart")
    gr.Markdown(HEADLINES)
    gr.Markdown(TREE_INTRO, latex_delimiters=LATEX)
    with gr.Row():
        with gr.Column(scale=1):
            top_width = gr.Slider(
                0.0,
                0.99,
                value=0.68,
                step=0.01,
                label="Agreement of the best of the tree's guesses per level",
                info="top-3 for a tree of 3 per level; the chain uses a above",
            )
            width = gr.Slider(2, 4, value=3, step=1, label="Guesses per level")
        with gr.Column(scale=2):
            tree_theory = gr.Plot(label="Chain against tree, with this machine's cost curve", elem_id="tree-theory")
    gr.Markdown(MACHINE_INTRO, latex_delimiters=LATEX)
    machine = gr.Markdown(elem_id="machine-costs")
    cost_plot = gr.Plot(label="Verification cost curve, measured here", elem_id="cost-curve")
    curve, recipe = head_training()
    if curve:
        gr.Markdown(head_intro(curve, head_realistic_agreement(), recipe))
        gr.Plot(
            explainer_charts.learning_curve_figure(curve, recipe),
            label="Draft head: held-out agreement while training",
            elem_id="head-curve",
        )
    gr.Markdown(STEP_INTRO)
    with gr.Row():
        previous = gr.Button("◀ previous step", size="sm")
        step = gr.Slider(1, 2, value=1, step=1, label="Step of the last race", interactive=False)
        following = gr.Button("next step ▶", size="sm")
    step_html = gr.HTML()

    sliders = [a, c, k]
    for slider in sliders:
        slider.change(
            explainer_handlers.theory_view,
            sliders + [last_race],
            theory,
            api_visibility="private",
            show_progress="hidden",
        )
    tree_inputs = [a, top_width, width, c, last_race]
    for slider in (a, c, top_width, width):
        slider.change(
            explainer_handlers.tree_theory_view,
            tree_inputs,
            tree_theory,
            api_visibility="private",
            show_progress="hidden",
        )
    use_last.click(explainer_handlers.measured_values, last_race, sliders, api_visibility="private").then(
        explainer_handlers.theory_view, sliders + [last_race], theory, api_visibility="private"
    )
    tab.select(explainer_handlers.step_slider, last_race, step, api_visibility="private").then(
        explainer_handlers.step_view, [step, last_race], step_html, api_visibility="private"
    ).then(explainer_handlers.theory_view, sliders + [last_race], theory, api_visibility="private").then(
        explainer_handlers.machine_view, last_race, [machine, cost_plot], api_visibility="private"
    ).then(explainer_handlers.tree_theory_view, tree_inputs, tree_theory, api_visibility="private")
    step.change(
        explainer_handlers.step_view, [step, last_race], step_html, api_visibility="private", show_progress="hidden"
    )
    previous.click(lambda i: max(1, int(i) - 1), step, step, api_visibility="private")
    following.click(lambda i: int(i) + 1, step, step, api_visibility="private")

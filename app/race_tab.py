"""The Race tab's layout and wiring: prompt and settings, the two panes, the draft tree, the charts."""

from __future__ import annotations

import gradio as gr

from specdec_core.sources import public_mode, public_parameter_bound

from . import limits, race_handlers, views
from .limits import GENERATION
from .presets import PRESETS, default_target
from .workloads import builtin_sets, race_presets
from .zerogpu import gpu_handler


def race_tab(last_race: gr.State) -> dict:
    with gr.Row():
        with gr.Column(scale=3):
            prompt = gr.Textbox(
                label="Prompt",
                lines=5,
                value=builtin_sets()["structured"]["prompts"][0]["text"],
                info=f"Sent as a user turn in the model's chat template; "
                f"at most {limits.MAX_PROMPT_CHARS:,} characters.",
            )
            labels, texts = zip(*race_presets(), strict=True)
            gr.Examples(
                examples=[[t] for t in texts],
                inputs=[prompt],
                example_labels=list(labels),
                label="Workload presets",
                cache_examples=False,
            )
            with gr.Row():
                run = gr.Button("Race", variant="primary")
                stop = gr.Button("Stop", variant="stop")
        with gr.Column(scale=2):
            target = gr.Dropdown(
                choices=[(p.label, p.target) for p in PRESETS],
                value=default_target(),
                label="Target model",
                allow_custom_value=True,
                info=_target_info(),
            )
            drafter = race_handlers.drafter_choices(target.value)
            drafter.label, drafter.allow_custom_value, drafter.elem_id = "Drafter", True, "drafter"
            drafter.info = (
                "Must share the target's tokenizer. c: one draft pass over one target pass, measured on this machine. "
                "The EAGLE head is a small draft trained here for the embedded model; the bfloat16 copy agrees almost "
                "always; early exit is a deliberately bad draft."
            )
            running = gr.HTML(race_handlers.running_line(target.value, drafter.value))
            lesson = gr.Button(
                "Lesson setting: one draft chain (the head where there is one), fixed k = 3, greedy",
                size="sm",
                elem_id="lesson",
            )
            with gr.Row():
                k = gr.Slider(
                    1,
                    limits.MAX_K,
                    value=3,
                    step=1,
                    label="Draft depth k",
                    info=f"1 to {limits.MAX_K}: how deep the head or draft model drafts; the hybrid's lookup branch "
                    "sizes itself (each step says how long)",
                )
                adaptive = gr.Checkbox(
                    value=False, label="Adaptive k", info="picks k from measured a and cost; 0 when drafts lose"
                )
            decoding = gr.Radio(["greedy", "sampling"], value="greedy", label="Decoding")
            with gr.Row():
                temperature = gr.Slider(0.05, 2.0, value=1.0, step=0.05, label="Temperature", info="sampling only")
                top_k = gr.Number(value=0, minimum=0, maximum=1000, precision=0, label="Top-k (0 = off)")
            with gr.Row():
                top_p = gr.Slider(0.05, 1.0, value=1.0, step=0.05, label="Top-p")
                seed = gr.Number(value=0, minimum=0, precision=0, label="Seed")
            max_new_tokens = gr.Slider(
                8,
                limits.MAX_NEW_TOKENS,
                value=96,
                step=8,
                label="Max new tokens",
                info=f"at most {limits.MAX_NEW_TOKENS}",
                elem_id="race-tokens",
            )
    gr.HTML(views.legend_html())
    with gr.Row(equal_height=True):
        plain_pane = gr.HTML(elem_id="plain-pane")
        spec_pane = gr.HTML(elem_id="spec-pane")
    inline_rejected = gr.Checkbox(
        value=False,
        label="Show refused drafts inline",
        info="off: a thin red mark where a step refused drafts (hover it to list them); the pane reads as the output",
    )
    with gr.Row():
        with gr.Column(scale=3):
            tree_plot = gr.Plot(
                label="Draft tree of one step (a chain is a tree with one branch); hover a node for its numbers",
                elem_id="tree-view",
            )
        with gr.Column(scale=1):
            tree_step = gr.Slider(
                1,
                2,
                value=1,
                step=1,
                label="Step with a draft",
                info="follows the race live; drag to replay",
                interactive=False,
                elem_id="tree-step",
            )
            gr.Markdown(
                "<p class='note'>Green: the accepted path. Red: drafts the target judged and refused. "
                "Pale red: drafts below a refusal, never reached. Pale green: accepted after the answer's end "
                "token, so not emitted. Star: the target's own token, a correction (orange) or bonus (blue). "
                "Shapes: ◆ a lookup guess, ● a head or draft-model guess, ⬢ both proposed it.</p>"
            )
    rule_plot = gr.Plot(
        label="The rule at the step's deciding node: p, q, what a draw keeps, what a refusal leaves",
        elem_id="rule-picture",
    )
    summary = gr.HTML(elem_id="race-summary")
    plot = gr.Plot(label="Live charts", elem_id="race-charts")
    with gr.Accordion("Run details (JSON, as the API returns them)", open=False):
        details = gr.JSON(label="details")
    gr.Markdown(f"<p class='note'>{race_handlers.TIMING_NOTE}<br>{limits.SUMMARY}</p>")

    target.change(race_handlers.drafter_choices, target, drafter, api_visibility="private")
    lesson.click(race_handlers.lesson_setting, target, [drafter, k, adaptive, decoding], api_visibility="private")
    drafter.change(
        race_handlers.running_line, [target, drafter], running, api_visibility="private", show_progress="hidden"
    )
    event = gr.on(
        [run.click, prompt.submit],
        gpu_handler(race_handlers.run_race),
        inputs=[prompt, target, drafter, k, adaptive, decoding, temperature, top_k, top_p, seed, max_new_tokens],
        outputs=[plain_pane, spec_pane, plot, summary, details, last_race, tree_plot, rule_plot, tree_step],
        api_name="race",
        concurrency_id=GENERATION,
        concurrency_limit=limits.CONCURRENCY,
        show_progress="minimal",
    )
    stop.click(None, cancels=[event], api_visibility="private")
    panes = [plain_pane, spec_pane]
    event.then(race_handlers.panes_view, [inline_rejected, last_race], panes, api_visibility="private")
    inline_rejected.change(race_handlers.panes_view, [inline_rejected, last_race], panes, api_visibility="private")
    tree_step.input(
        race_handlers.tree_view,
        [tree_step, last_race],
        [tree_plot, rule_plot],
        api_visibility="private",
        show_progress="hidden",
    )
    return {"target": target, "drafter": drafter, "k": k, "adaptive": adaptive}


def _target_info() -> str:
    if public_mode():
        return (
            f"A preset, or a hub id of a model up to {public_parameter_bound() / 1e9:.0f}B parameters. "
            "Local files and folders are turned off in this public demo."
        )
    return "A preset, or any hub id / local folder / .gguf path. Hub models need network access."

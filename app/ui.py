"""build_ui(): the Blocks layout and its event wiring. Each tab's handlers live in race_handlers.py,
workload_handlers.py and explainer_handlers.py; views in views.py and charts.py."""

from __future__ import annotations

import html
from pathlib import Path

import gradio as gr

from specdec_core.sources import public_mode, public_parameter_bound

from . import charts, explainer_handlers, limits, race_handlers, views, workload_handlers
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
from .presets import PRESETS, default_target
from .workloads import CUSTOM, EVAL_PER_SET, builtin_sets, race_presets, set_choices
from .zerogpu import gpu_handler

CSS_FILE = Path(__file__).resolve().parent.parent / "assets" / "style.css"
LATEX = [{"left": "$$", "right": "$$", "display": True}, {"left": "$", "right": "$", "display": False}]
GENERATION = "generation"  # one concurrency group: races, checks and sweeps share the CPU one at a time


def build_ui(notice: str | None = None) -> gr.Blocks:
    """The app; notice: one line shown above the tabs (why the embedded default is missing, where it is)."""
    with gr.Blocks(title="Speculative decoding, shown and measured") as demo:
        last_race = gr.State(None)  # per browser session: the last race, for the explainer
        gr.Markdown(
            "# Speculative decoding, shown and measured\n"
            "A small **draft** guesses several tokens; the large **target** checks them all in one pass and keeps "
            "those it agrees with. The output is exactly the target's; only the speed changes, and by how much depends "
            "on your text."
        )
        if notice:
            gr.Markdown(f"<p class='note' id='default-notice'>{html.escape(notice)}</p>")
        with gr.Tabs():
            with gr.Tab("Race", id="race"):
                race = _race_tab(last_race)
            with gr.Tab("Workload check", id="workload"):
                _workload_tab(race)
            with gr.Tab("Explainer", id="explainer") as explainer_tab:
                _explainer_tab(last_race, explainer_tab)
        # The drafter labels carry each drafter's c once measured here: a page opened after the warm-up shows it.
        demo.load(race_handlers.drafter_choices, race["target"], race["drafter"], api_visibility="private")
    return demo


def _race_tab(last_race: gr.State) -> dict:
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
            with gr.Row():
                k = gr.Slider(1, limits.MAX_K, value=3, step=1, label="Draft length k", info=f"1 to {limits.MAX_K}")
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
            )
    gr.HTML(views.legend_html())
    with gr.Row(equal_height=True):
        plain_pane = gr.HTML(elem_id="plain-pane")
        spec_pane = gr.HTML(elem_id="spec-pane")
    inline_rejected = gr.Checkbox(
        value=False,
        label="Show refused drafts inline",
        info="off: one ✕n marker per step (hover it to list them), so the pane reads as the output",
    )
    with gr.Row():
        with gr.Column(scale=3):
            tree_plot = gr.Plot(
                label="Draft tree of one step (a chain is a tree with one branch); hover a node for q, p, min(1, p/q)",
                elem_id="tree-view",
            )
        with gr.Column(scale=1):
            tree_step = gr.Slider(
                1,
                2,
                value=1,
                step=1,
                label="Step",
                info="follows the race live; drag to replay",
                interactive=False,
                elem_id="tree-step",
            )
            gr.Markdown(
                "<p class='note'>Green: the accepted path. Red: drafts the target judged and refused. "
                "Pale red: drafts below a refusal, never reached. Pale green: accepted after the answer's end "
                "token, so not emitted. "
                "Star: the target's correction (orange) or bonus (blue).</p>"
            )
    summary = gr.HTML(elem_id="race-summary")
    plot = gr.Plot(label="Live charts", elem_id="race-charts")
    with gr.Accordion("Run details (JSON, as the API returns them)", open=False):
        details = gr.JSON(label="details")
    gr.Markdown(f"<p class='note'>{race_handlers.TIMING_NOTE}<br>{limits.SUMMARY}</p>")

    target.change(race_handlers.drafter_choices, target, drafter, api_visibility="private")
    drafter.change(
        race_handlers.running_line, [target, drafter], running, api_visibility="private", show_progress="hidden"
    )
    event = gr.on(
        [run.click, prompt.submit],
        gpu_handler(race_handlers.run_race),
        inputs=[prompt, target, drafter, k, adaptive, decoding, temperature, top_k, top_p, seed, max_new_tokens],
        outputs=[plain_pane, spec_pane, plot, summary, details, last_race, tree_plot, tree_step],
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
        race_handlers.tree_view, [tree_step, last_race], tree_plot, api_visibility="private", show_progress="hidden"
    )
    return {"target": target, "drafter": drafter, "k": k, "adaptive": adaptive}


def _target_info() -> str:
    if public_mode():
        return (
            f"A preset, or a hub id of a model up to {public_parameter_bound() / 1e9:.0f}B parameters. "
            "Local files and folders are turned off in this public demo."
        )
    return "A preset, or any hub id / local folder / .gguf path. Hub models need network access."


def _workload_tab(race: dict) -> None:
    gr.Markdown(
        "Runs each prompt through both decoders in turn, with the model, drafter and k of the **Race** tab. "
        "Structured prompts are decoded greedily, creative ones sampled at temperature 1. "
        "**Measure both before making speculation a global setting**: it pays on some workloads and costs on others."
    )
    with gr.Row():
        with gr.Column():
            named = {
                "structured": "structured (JSON, code edit, list, extraction, copying)",
                "creative": "creative (poem, story, brainstorm)",
            }
            sets = gr.CheckboxGroup(
                [(named.get(name, label), name) for label, name in set_choices()] + [("your prompts", CUSTOM)],
                value=["structured", "creative"],
                label="Prompt sets",
                info=f"at most {limits.MAX_WORKLOAD_PROMPTS} prompts per check. Spec-Bench (Xia et al. 2024, "
                f"first turns, {EVAL_PER_SET} per task) and the realistic held-out set are greedy, for reading "
                "against published numbers.",
            )
            own_prompts = gr.Textbox(
                label="Your prompts, one per line", lines=4, placeholder="Summarise this ticket: ..."
            )
            own_temperature = gr.Slider(
                0.0, 2.0, value=0.0, step=0.05, label="Temperature for your prompts (0 = greedy)"
            )
            max_new_tokens = gr.Slider(8, limits.MAX_NEW_TOKENS, value=48, step=8, label="Max new tokens per prompt")
            with gr.Row():
                run = gr.Button("Run workload check", variant="primary")
                stop = gr.Button("Stop", variant="stop")
        with gr.Column():
            status = gr.Markdown("Results appear here prompt by prompt.")
            downloads = gr.File(label="Download results (CSV, JSON)", file_count="multiple", interactive=False)
    table = gr.Dataframe(
        headers=_headers(workload_handlers.TABLE_COLUMNS), label="Per prompt", interactive=False, wrap=True
    )
    chart = gr.Plot(label="Speedup and acceptance per prompt")
    event = run.click(
        gpu_handler(workload_handlers.run_workload),
        inputs=[
            sets,
            own_prompts,
            own_temperature,
            race["target"],
            race["drafter"],
            race["k"],
            race["adaptive"],
            max_new_tokens,
        ],
        outputs=[status, table, chart, downloads],
        api_name="workload_check",
        concurrency_id=GENERATION,
        concurrency_limit=limits.CONCURRENCY,
        show_progress="minimal",
    )
    stop.click(None, cancels=[event], api_visibility="private")

    gr.Markdown("### k sweep\nGreedy speedup and acceptance for k = 1 … 8 on one prompt, against one plain run.")
    with gr.Row():
        with gr.Column():
            sweep_prompt = gr.Textbox(label="Prompt", lines=3, value=builtin_sets()["structured"]["prompts"][1]["text"])
            sweep_tokens = gr.Slider(8, 128, value=32, step=8, label="Max new tokens per run")
            sweep_run = gr.Button("Run k sweep", variant="primary")
            sweep_status = gr.Markdown()
        with gr.Column():
            sweep_chart = gr.Plot(label="Speedup vs k")
    sweep_table = gr.Dataframe(headers=_headers(workload_handlers.SWEEP_COLUMNS), interactive=False)
    sweep_run.click(
        gpu_handler(workload_handlers.run_sweep),
        inputs=[sweep_prompt, race["target"], race["drafter"], sweep_tokens],
        outputs=[sweep_status, sweep_chart, sweep_table],
        api_name="k_sweep",
        concurrency_id=GENERATION,
        concurrency_limit=limits.CONCURRENCY,
        show_progress="minimal",
    )


def _headers(columns: list[str]) -> list[str]:
    return [workload_handlers.COLUMN_HEADERS[c] for c in columns]


def _explainer_tab(last_race: gr.State, tab: gr.Tab) -> None:
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
            charts.learning_curve_figure(curve, recipe),
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


def launch(demo: gr.Blocks, **kwargs):
    """Queue and launch with the project's CSS; offline-safe (no analytics, no SSR node server)."""
    demo.queue(max_size=limits.QUEUE_SIZE, default_concurrency_limit=limits.CONCURRENCY)
    # show_error: a bad value sent through the API (a string for a number) reaches the caller as a message.
    return demo.launch(css=CSS_FILE.read_text(), theme=gr.themes.Default(), ssr_mode=False, show_error=True, **kwargs)

"""The Workload check tab's layout and wiring: prompt sets run through both decoders, and the k sweep."""

from __future__ import annotations

import gradio as gr

from . import limits, workload_check, workload_handlers
from .copying import COPY_RULE
from .limits import GENERATION
from .server_section import server_section
from .workload_report import COLUMN_HEADERS, TABLE_COLUMNS
from .workloads import CUSTOM, EVAL_PER_SET, builtin_sets, set_choices
from .zerogpu import gpu_handler

# Pixels per column of the per-prompt table, each at least its header's longest word, so that none breaks; the
# same widths serve a served model's columns (server_handlers.SERVER_HEADERS).
TABLE_WIDTHS = [120, 110, 70, 80, 80, 90, 90, 90, 90, 90, 90, 260]
SPREAD_RULE = (
    "Speedup: speculative over plain tokens per second, each on its own clock; the median of the repeats, with "
    "their min–max (too few repeats for quartiles). Same seed every repeat, so only the timing varies."
)


def workload_tab(race: dict) -> None:
    gr.Markdown(
        "Runs each prompt through both decoders in turn, with the model, drafter and k of the **Race** tab "
        "(listed above the results). Structured prompts are decoded greedily, creative ones sampled at "
        "temperature 1. **Measure both before making speculation a global setting**: it pays on some workloads "
        "and costs on others. Or point it at **a served model** (vLLM, or any OpenAI-compatible server) to "
        "read the server's own speculative counters on the same prompts."
    )
    with gr.Row():
        with gr.Column():
            server = server_section()
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
            with gr.Row():
                max_new_tokens = gr.Slider(
                    8,
                    limits.MAX_NEW_TOKENS,
                    value=48,
                    step=8,
                    label="Max new tokens per prompt",
                    elem_id="workload-tokens",
                )
                repeats = _repeats_slider("each prompt, plain then speculative", "workload-repeats")
            with gr.Row():
                run = gr.Button("Run workload check", variant="primary")
                stop = gr.Button("Stop", variant="stop")
        with gr.Column():
            status = gr.Markdown("Results appear here prompt by prompt.", elem_id="workload-status")
            downloads = gr.File(
                label="Download results (CSV and JSON, with this configuration)",
                file_count="multiple",
                interactive=False,
            )
    config = gr.HTML(elem_id="workload-config")
    table = gr.Dataframe(
        headers=[COLUMN_HEADERS[c] for c in TABLE_COLUMNS],
        label="Per prompt",
        interactive=False,
        wrap=True,
        column_widths=TABLE_WIDTHS,
        elem_id="workload-table",
    )
    gr.Markdown(f"<p class='note'>{SPREAD_RULE} {COPY_RULE}</p>")
    with gr.Accordion("Read a prompt's whole output", open=True):
        picker = gr.Dropdown(choices=[], value=None, label="Prompt", info="filled when a check is done")
        verdict = gr.Markdown(elem_id="workload-output-note")
        with gr.Row():
            prompt_text = gr.Textbox(label="Prompt", lines=6, max_lines=14, interactive=False)
            output_text = gr.Textbox(label="Speculative output", lines=6, max_lines=14, interactive=False)
    chart = gr.Plot(label="Speedup and acceptance per prompt")
    results = gr.State([])  # the finished check's rows, for the output viewer
    event = run.click(
        gpu_handler(workload_check.run_check),
        inputs=[
            sets,
            own_prompts,
            own_temperature,
            race["target"],
            race["drafter"],
            race["k"],
            race["adaptive"],
            max_new_tokens,
            repeats,
            *server.values(),
        ],
        outputs=[status, table, chart, downloads, config, results, picker],
        api_name="workload_check",
        concurrency_id=GENERATION,
        concurrency_limit=limits.CONCURRENCY,
        show_progress="minimal",
    )
    stop.click(None, cancels=[event], api_visibility="private")
    picker.change(
        workload_handlers.show_output,
        [picker, results],
        [verdict, prompt_text, output_text],
        api_visibility="private",
        show_progress="hidden",
    )
    _sweep_section(race)


def _sweep_section(race: dict) -> None:
    gr.Markdown(
        "### k sweep\nGreedy speedup and acceptance for k = 1 … 8 on one prompt: per k the median over the "
        "repeats with its min–max, each run over the median plain run."
    )
    with gr.Row():
        with gr.Column():
            prompt = gr.Textbox(label="Prompt", lines=3, value=builtin_sets()["structured"]["prompts"][1]["text"])
            with gr.Row():
                tokens = gr.Slider(8, 128, value=32, step=8, label="Max new tokens per run")
                repeats = _repeats_slider("one plain run and one per k", "sweep-repeats")
            run = gr.Button("Run k sweep", variant="primary")
            status = gr.Markdown()
        with gr.Column():
            chart = gr.Plot(label="Speedup vs k (median, min–max)")
    table = gr.Dataframe(headers=workload_handlers.SWEEP_HEADERS, interactive=False, elem_id="sweep-table")
    run.click(
        gpu_handler(workload_handlers.run_sweep),
        inputs=[prompt, race["target"], race["drafter"], tokens, repeats],
        outputs=[status, chart, table],
        api_name="k_sweep",
        concurrency_id=GENERATION,
        concurrency_limit=limits.CONCURRENCY,
        show_progress="minimal",
    )


def _repeats_slider(what: str, elem_id: str) -> gr.Slider:
    return gr.Slider(
        1,
        workload_handlers.MAX_REPEATS,
        value=workload_handlers.DEFAULT_REPEATS,
        step=1,
        label="Repeats",
        info=f"{what}; median and min–max",
        elem_id=elem_id,
    )

"""The Workload check tab's layout and wiring: prompt sets run through both decoders, and the k sweep."""

from __future__ import annotations

import gradio as gr

from . import limits, workload_handlers
from .limits import GENERATION
from .workloads import CUSTOM, EVAL_PER_SET, builtin_sets, set_choices
from .zerogpu import gpu_handler


def workload_tab(race: dict) -> None:
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

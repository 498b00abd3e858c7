"""The workload check's source: this app's engine, or a served model (an OpenAI-compatible server); the server's
fields, shown when it is chosen."""

from __future__ import annotations

import gradio as gr

from specdec_core.served.addresses import ALLOWLIST_VARIABLE, allowlist
from specdec_core.sources import public_mode

from .server_handlers import ENGINE, SERVER

SOURCES = [("this app's engine", ENGINE), ("a served model (OpenAI-compatible)", SERVER)]


def server_section() -> dict[str, gr.components.Component]:
    """The source radio and the server's fields (hidden until a served model is chosen), by name."""
    source = gr.Radio(
        SOURCES,
        value=ENGINE,
        label="Source",
        info="a served model: each prompt is sent once, with the server's own model and speculation (the Race "
        "tab's settings and the repeats apply to this app's engine)",
    )
    # Every field has a value, so that API callers of /workload_check may leave the server's fields out.
    with gr.Group(visible=False) as fields:
        gr.Markdown(_note())
        base_url = gr.Textbox("", label="Server base URL", placeholder="http://127.0.0.1:8000/v1")
        model = gr.Textbox("", label="Model name (as the server serves it)", placeholder="my-model")
        api_key = gr.Textbox("", label="API key (optional; never shown, logged or saved)", type="password")
        baseline_url = gr.Textbox(
            "",
            label="Baseline URL (optional): the same model served without speculation, for the speedup",
            placeholder="http://127.0.0.1:8001/v1",
        )
        compare = gr.Checkbox(
            False,
            label="Side by side with this app's n-gram drafter on the embedded model (greedy prompts; the server "
            "must serve the embedded SmolLM2-135M with n-gram speculation)",
        )
        with gr.Row():
            lookup_max = gr.Number(3, label="Server's prompt_lookup_max", precision=0, minimum=1, maximum=8)
            lookup_min = gr.Number(1, label="Server's prompt_lookup_min", precision=0, minimum=1, maximum=8)
    source.change(lambda chosen: gr.Group(visible=chosen == SERVER), source, fields, api_visibility="private")
    return {
        "source": source,
        "base_url": base_url,
        "model": model,
        "api_key": api_key,
        "baseline_url": baseline_url,
        "compare": compare,
        "lookup_max": lookup_max,
        "lookup_min": lookup_min,
    }


def _note() -> str:
    """What the check does with a server; on a public demo, which servers it may call."""
    lines = [
        "Each prompt goes to the server alone, streamed: tokens per second, time to first token, and the "
        "server's speculative-decoding counters (vLLM's `/metrics`) before and after it."
    ]
    if public_mode():
        listed = ", ".join(sorted(allowlist())) or f"none: the owner has set no {ALLOWLIST_VARIABLE}, so this is off"
        lines.append(f"On this public demo only listed servers are called ({listed}).")
    return " ".join(lines)

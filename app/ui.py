"""build_ui(): the page, its tabs (race_tab.py, workload_tab.py, explainer_tab.py: layout and wiring; each
tab's handlers in <tab>_handlers.py) and launch()."""

from __future__ import annotations

import html
from pathlib import Path

import gradio as gr

from . import limits, race_handlers
from .explainer_tab import explainer_tab
from .race_tab import race_tab
from .workload_tab import workload_tab

CSS_FILE = Path(__file__).resolve().parent.parent / "assets" / "style.css"


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
                race = race_tab(last_race)
            with gr.Tab("Workload check", id="workload"):
                workload_tab(race)
            with gr.Tab("Explainer", id="explainer") as explainer:
                explainer_tab(last_race, explainer)
        # The drafter labels carry each drafter's c once measured here: a page opened after the warm-up shows it.
        demo.load(race_handlers.drafter_choices, race["target"], race["drafter"], api_visibility="private")
    return demo


def launch(demo: gr.Blocks, **kwargs):
    """Queue and launch with the project's CSS; offline-safe (no analytics, no SSR node server)."""
    demo.queue(max_size=limits.QUEUE_SIZE, default_concurrency_limit=limits.CONCURRENCY)
    # show_error: a bad value sent through the API (a string for a number) reaches the caller as a message.
    return demo.launch(css=CSS_FILE.read_text(), theme=gr.themes.Default(), ssr_mode=False, show_error=True, **kwargs)

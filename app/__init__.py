"""The Gradio app: renders specdec_core's events. ui.py builds the page; each tab has its layout in <tab>_tab.py,
its handlers in <tab>_handlers.py and its figures in <tab>_charts.py (race, workload, explainer); token HTML in
views.py."""

import os

# Before Gradio is imported anywhere: no usage analytics (the app must start offline).
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

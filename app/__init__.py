"""The Gradio app: renders specdec_core's events. Layout in ui.py; each tab's handlers in race_handlers.py,
workload_handlers.py and explainer_handlers.py; views in views.py and charts.py."""

import os

# Before Gradio is imported anywhere: no usage analytics (the app must start offline).
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

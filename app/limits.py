"""Limits that protect a shared 2-vCPU Space. Each is shown in the UI where it applies; those of
one run (tokens, prompt length) are the engine's own (specdec_core/limits.py)."""

import os

from specdec_core.limits import MAX_NEW_TOKENS, MAX_PROMPT_CHARS, MEASURED_DRAFT_TOKENS

MAX_K = MEASURED_DRAFT_TOKENS  # the drafts this machine's measured costs price
RUN_SECONDS = float(os.environ.get("SPECDEC_RUN_SECONDS", "90"))  # per decoder, per run
MAX_WORKLOAD_PROMPTS = 12
QUEUE_SIZE = int(os.environ.get("SPECDEC_QUEUE_SIZE", "16"))
CONCURRENCY = 1  # one generation at a time keeps timings honest on 2 cores
GENERATION = "generation"  # one concurrency group: races, checks and sweeps share the CPU one at a time

SUMMARY = (
    f"Limits: up to {MAX_NEW_TOKENS} new tokens, {MAX_PROMPT_CHARS:,} prompt characters, k ≤ {MAX_K}, "
    f"{RUN_SECONDS:.0f} s per decoder per run; one run at a time, {QUEUE_SIZE} waiting at most; "
    "models stay loaded while they fit in free memory (the least recently used is dropped first)."
)

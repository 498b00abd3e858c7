"""A served model as a workload-check source: an OpenAI-compatible server (vLLM, SGLang) asked one prompt at a
time, its speculative-decoding counters read around each prompt, and the same prompts through this engine's
n-gram drafter beside it.

metrics (the Prometheus counters and their deltas), addresses (which server URLs a public demo may call), client
(one streamed chat completion, timed), check (a prompt and a set against a server, results as frozen dataclasses),
compare (the side by side with this engine). The engine never imports this package.
"""

"""From a start of the app to its first finished race, as a visitor meets it: `python3 app.py` in a new process on
loopback, the page fetched, then the default race through the app's API. With empty caches (the default) the start
converts the embedded model and measures this machine's costs, as a Space's first start does; --warm keeps the
caches this machine has, as every later start does."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from gradio_client import Client

from app.presets import PRESETS
from specdec_core.machine import this_machine
from specdec_core.sources import EMBEDDED_ID

ROOT = Path(__file__).resolve().parents[1]
PROMPT = "List three colours as a JSON array, then name one thing of each colour."
PAGE_SECONDS = 120
RACE_SECONDS = 1200  # a first start converts the model and measures the costs before the race runs


def first_start_report(args) -> dict:
    with tempfile.TemporaryDirectory(prefix="specdec-first-start-") as folder:
        env = {**os.environ, "GRADIO_SERVER_NAME": "127.0.0.1", "GRADIO_SERVER_PORT": str(_free_port())}
        if not args.warm:
            env["SPECDEC_CACHE_DIR"] = folder  # its tuning/ too: nothing measured before
            env.pop("SPECDEC_TUNING_DIR", None)
        log = Path(folder) / "app.log"
        started = time.monotonic()
        with log.open("w") as out:
            process = subprocess.Popen([sys.executable, "app.py"], cwd=ROOT, env=env, stdout=out, stderr=out)
        try:
            url = f"http://127.0.0.1:{env['GRADIO_SERVER_PORT']}/"
            page_s = _wait_for_page(url, process, log, started)
            details = _first_race(url, args.tokens)
            race_s = time.monotonic() - started
        finally:
            process.terminate()
            process.wait(timeout=30)
    return {
        "machine": this_machine().as_dict(),
        "caches": "this machine's" if args.warm else "none",
        "page_s": round(page_s, 1),
        "first_race_s": round(race_s, 1),
        "race": {"drafter": PRESETS[0].drafts[0], "tokens": len(details["spec_tokens"]), "prompt": PROMPT},
        "identical": details["identical"],
    }


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_for_page(url: str, process: subprocess.Popen, log: Path, started: float) -> float:
    while time.monotonic() - started < PAGE_SECONDS and process.poll() is None:
        try:
            httpx.get(url, timeout=2)
            return time.monotonic() - started
        except httpx.HTTPError:
            time.sleep(0.2)
    raise SystemExit(f"app.py served no page within {PAGE_SECONDS} s:\n{log.read_text()[-3000:]}")


def _first_race(url: str, tokens: int) -> dict:
    """The default preset's race, greedy: it waits for the start's warm-up as a visitor's first race does."""
    client = Client(url, verbose=False, httpx_kwargs={"timeout": RACE_SECONDS})
    race = dict(k=3, adaptive=True, decoding="greedy", temperature=1.0, top_k=0, top_p=1.0, seed=0)
    outputs = client.predict(
        prompt=PROMPT,
        target=EMBEDDED_ID,
        drafter=PRESETS[0].drafts[0],
        max_new_tokens=tokens,
        **race,
        api_name="/race",
    )
    return outputs[4]  # target-only pane, speculative pane, charts, summary, details, draft tree, tree step

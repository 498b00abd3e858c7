"""Load test: the app on loopback, driven by concurrent gradio_client sessions.

    python -m tests.load.load_test --clients 8 --races 3

Starts `app.py` in a child process (so its memory can be watched), measures each prompt's reference
output once, then lets every client race its own prompts while some cancel mid-run, some disconnect
mid-stream and some send bad input. Checks: every valid run completes with greedy output equal to
the target-only output *and* to its prompt's reference (so no session saw another's tokens), the CPU
is freed after a cancel or disconnect, and the app's memory returns to its baseline. Everything is
bounded: a fixed number of requests, each with a timeout, and the child is stopped at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import psutil
from gradio_client import Client

from specdec_core.limits import MAX_PROMPT_CHARS
from tests.conftest import die_with_the_test_run, loopback_port

ROOT = Path(__file__).resolve().parents[2]
PROMPTS = [
    "List three colours as a JSON array.",
    "Write the numbers one to six in words, comma separated.",
    "Give a JSON object with keys a and b set to 1 and 2.",
    "Name four planets, one per line.",
    "Spell the word cat letter by letter.",
    "Write a Python function that returns 42.",
    "List the first three months of the year.",
    "Give two animals that live in the sea.",
]
RACE = dict(
    target="embedded:SmolLM2-135M-Instruct",
    drafter="ngram",
    k=3,
    adaptive=False,
    decoding="greedy",
    temperature=1.0,
    top_k=0,
    top_p=1.0,
    seed=0,
)
LONG_PROMPT = "Write a long story about a dragon who learns to bake bread."
BAD_INPUTS = [
    dict(prompt="   "),
    dict(prompt="x" * (MAX_PROMPT_CHARS + 1)),
    dict(k=0),
    dict(max_new_tokens=10**6),
    dict(target="no-such/model"),
]


@dataclass
class Report:
    completed: int = 0
    wrong_output: int = 0
    cancelled: int = 0
    disconnected: int = 0
    errors: Counter = field(default_factory=Counter)
    first_token_seconds: list[float] = field(default_factory=list)
    freed_after_abort_seconds: list[float] = field(default_factory=list)
    long_race_seconds: float = 0.0  # the aborted race, run to its end once, for comparison
    baseline_mib: float = 0.0
    peak_mib: float = 0.0
    after_mib: float = 0.0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def summary(self) -> dict:
        latencies = sorted(self.first_token_seconds)
        pct = lambda q: latencies[min(len(latencies) - 1, int(q * len(latencies)))] if latencies else None  # noqa: E731
        return {
            "completed": self.completed,
            "wrong_output": self.wrong_output,
            "cancelled": self.cancelled,
            "disconnected": self.disconnected,
            "errors_by_kind": dict(self.errors),
            "first_token_p50_s": pct(0.5),
            "first_token_p95_s": pct(0.95),
            "freed_after_abort_s": self.freed_after_abort_seconds,
            "long_race_uninterrupted_s": round(self.long_race_seconds, 1),
            "baseline_mib": round(self.baseline_mib),
            "peak_mib": round(self.peak_mib),
            "after_mib": round(self.after_mib),
        }


def start_app(port: int) -> subprocess.Popen:
    env = {**os.environ, "GRADIO_SERVER_PORT": str(port), "GRADIO_SERVER_NAME": "127.0.0.1", "SPECDEC_QUEUE_SIZE": "64"}
    process = subprocess.Popen(
        [sys.executable, "app.py"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        preexec_fn=die_with_the_test_run,
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/config", timeout=2).status_code == 200:
                return process
        except httpx.HTTPError:
            time.sleep(0.5)
    process.kill()
    raise RuntimeError("the app did not start within 120 s")


def race(client: Client, prompt: str, tokens: int, report: Report | None = None, **overrides) -> dict:
    """One streamed race; records latency to the first streamed token."""
    started = time.monotonic()
    job = client.submit(prompt=prompt, max_new_tokens=tokens, **{**RACE, **overrides}, api_name="/race")
    first = None
    for update in job:
        if first is None and "tok tok-" in (update[0] or "") + (update[1] or ""):
            first = time.monotonic() - started
    if report is not None and first is not None:
        with report.lock:
            report.first_token_seconds.append(first)
    return job.result(timeout=300)[4]


def watch_memory(process: psutil.Process, report: Report, stop: threading.Event) -> None:
    while not stop.is_set():
        try:
            report.peak_mib = max(report.peak_mib, process.memory_info().rss / 2**20)
        except psutil.Error:
            return
        stop.wait(0.2)


def client_prompt(index: int, race_number: int) -> str:
    """The prompt client `index` races in its race `race_number`."""
    return PROMPTS[(index + race_number) % len(PROMPTS)]


def client_loop(
    url: str, index: int, races: int, tokens: int, references: dict[str, list[int]], report: Report
) -> None:
    client = Client(url, verbose=False)
    for r in range(races):
        prompt = client_prompt(index, r)
        role = (index + r) % 4  # a quarter each: bad input, cancel mid-run, and (twice) a normal race
        try:
            if role == 1:
                overrides = dict(BAD_INPUTS[(index + r) % len(BAD_INPUTS)])
                race(client, overrides.pop("prompt", prompt), overrides.pop("max_new_tokens", tokens), **overrides)
                with report.lock:
                    report.errors["bad input accepted (should not be)"] += 1
            elif role == 2:
                job = client.submit(prompt=prompt, max_new_tokens=tokens, **RACE, api_name="/race")
                for i, _ in enumerate(job):
                    if i >= 2:
                        break
                job.cancel()
                with report.lock:
                    report.cancelled += 1
            else:
                details = race(client, prompt, tokens, report)
                ok = details["identical"] and details["plain_tokens"] == references[prompt]
                with report.lock:
                    report.completed += ok
                    report.wrong_output += not ok
        except Exception as error:  # noqa: BLE001 - each failure is counted by kind
            kind = "expected: bad input refused" if role == 1 else f"{type(error).__name__}: {str(error)[:80]}"
            with report.lock:
                report.errors[kind] += 1
    client.close()


def abort_frees_cpu(url: str, how: str, long_tokens: int, report: Report) -> None:
    """Start a long race, abort it (cancel or disconnect), then time a short race behind it.

    With one generation at a time, a long race still running would hold the short one in the
    queue for its whole length (tens of seconds); freed, the short one starts at once."""
    if how == "cancel":
        job = Client(url, verbose=False).submit(
            prompt=LONG_PROMPT, max_new_tokens=long_tokens, **RACE, api_name="/race"
        )
        for i, _ in enumerate(job):
            if i >= 2:
                break
        job.cancel()
    else:
        disconnect_mid_stream(url, long_tokens)
    started = time.monotonic()
    race(Client(url, verbose=False), "Say hi.", 8)
    with report.lock:
        report.freed_after_abort_seconds.append(round(time.monotonic() - started, 2))
        report.disconnected += how == "disconnect"


def disconnect_mid_stream(url: str, long_tokens: int) -> None:
    """Joins the queue and reads a few streamed messages over raw HTTP, then drops the connection,
    as a closed browser tab does (gradio_client offers no way to drop its stream)."""
    config = httpx.get(f"{url}config", timeout=10).json()
    fn_index = next(i for i, d in enumerate(config["dependencies"]) if d.get("api_name") == "race")
    values = {"prompt": LONG_PROMPT, "max_new_tokens": long_tokens, **RACE}
    order = [
        "prompt",
        "target",
        "drafter",
        "k",
        "adaptive",
        "decoding",
        "temperature",
        "top_k",
        "top_p",
        "seed",
        "max_new_tokens",
    ]
    session = f"disconnect-{time.monotonic_ns()}"
    body = {"data": [values[name] for name in order], "fn_index": fn_index, "session_hash": session}
    httpx.post(f"{url}gradio_api/queue/join", json=body, timeout=10).raise_for_status()
    with httpx.stream("GET", f"{url}gradio_api/queue/data", params={"session_hash": session}, timeout=60) as stream:
        generating = 0
        for line in stream.iter_lines():
            generating += "process_generating" in line
            if generating >= 3:
                break  # leaving the block closes the connection mid-stream


def run(clients: int, races: int, tokens: int, long_tokens: int = 256) -> dict:
    port = loopback_port()
    url = f"http://127.0.0.1:{port}/"
    process = start_app(port)
    report = Report()
    stop = threading.Event()
    try:
        app = psutil.Process(process.pid)
        used = {client_prompt(i, r) for i in range(clients) for r in range(races)}
        references = {p: race(Client(url, verbose=False), p, tokens)["plain_tokens"] for p in used}
        report.baseline_mib = app.memory_info().rss / 2**20
        watcher = threading.Thread(target=watch_memory, args=(app, report, stop), daemon=True)
        watcher.start()
        threads = [
            threading.Thread(target=client_loop, args=(url, i, races, tokens, references, report))
            for i in range(clients)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=900)
        started = time.monotonic()
        race(Client(url, verbose=False), LONG_PROMPT, long_tokens)
        report.long_race_seconds = time.monotonic() - started
        abort_frees_cpu(url, "cancel", long_tokens, report)
        abort_frees_cpu(url, "disconnect", long_tokens, report)
        time.sleep(2)
        report.after_mib = app.memory_info().rss / 2**20
    finally:
        stop.set()
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
    return report.summary()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--races", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=24)
    parser.add_argument("--long-tokens", type=int, default=256, help="length of the race that is cancelled / dropped")
    args = parser.parse_args()
    print(json.dumps(run(args.clients, args.races, args.tokens, args.long_tokens), indent=2))


if __name__ == "__main__":
    main()

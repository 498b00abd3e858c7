"""The workload check with a served model as its source: each prompt of the chosen sets sent to an OpenAI-compatible
server (specdec_core/served), its speculative counters per prompt, a baseline server for the speedup, and this
engine's n-gram drafter beside it on the embedded model. Yields the tab's outputs as the engine's check does
(workload_handlers.check_outputs): the rows carry each output and its copy flag for the same viewer."""

from __future__ import annotations

import contextlib
import csv
import json
import tempfile
from collections.abc import Iterator
from pathlib import Path

import gradio as gr
import pandas as pd

from specdec_core import EMBEDDED_ID, LoadedModel, SpecDecError, load_model
from specdec_core.served.addresses import server_address
from specdec_core.served.check import (
    ServedPrompt,
    SetResult,
    by_workload,
    check_prompt,
    draft_length,
    prompt_record,
)
from specdec_core.served.client import ServerClient
from specdec_core.served.compare import Lookup, comparison_record, side_by_side

from . import server_charts, workload_handlers, workload_report
from .check_config import SERVED_SOURCE, CheckConfig, decoding_name, running_commit
from .copying import copies_prompt, copy_share
from .inputs import number, shown_as_message
from .limits import MAX_K, MAX_NEW_TOKENS, RUN_SECONDS
from .workloads import select_prompts

ENGINE, SERVER = "engine", "server"  # the workload check's sources
SERVER_CPU = "the server's (this app only sends the requests)"
TIMEOUT_SECONDS = 60.0  # one read from the server (a first token, a chunk, the metrics page)
# What the table shows, by field, in the order of the engine's columns so that the tab's column widths fit both
# (workload_tab.TABLE_WIDTHS); the downloads keep every field. Short, so no header breaks a word.
SERVER_HEADERS = {
    "workload": "Set",
    "prompt": "Prompt",
    "first_token_s": "First token s",
    "tok_s": "Tok/s",
    "baseline_tok_s": "Baseline tok/s",
    "speedup": "Speedup ×",
    "acceptance_rate": "Accepted / drafted",
    "tokens_per_pass": "Tokens / pass",
    "acceptance_by_position": "By position",
    "copy_share": "Copied",
    "identical": "Same as ours",
    "ours_tokens_per_pass": "Ours: tokens / pass",
}


def run_server_check(
    sets: list[str],
    own_prompts: str,
    own_temperature: float,
    max_new_tokens: float,
    base_url: str,
    model: str,
    api_key: str,
    baseline_url: str,
    compare: bool,
    lookup_max: float,
    lookup_min: float,
) -> Iterator[tuple]:
    """Each prompt to the server (and the baseline server), one at a time; yields the tab's outputs."""
    with shown_as_message(), contextlib.ExitStack() as stack:
        prompts = select_prompts(list(sets or []), own_prompts, number("temperature", own_temperature))
        tokens = _token_budget(max_new_tokens)
        server = stack.enter_context(_client(base_url, model, api_key))
        baseline = stack.enter_context(_client(baseline_url, model, api_key)) if (baseline_url or "").strip() else None
        lookup = _lookup(server, lookup_max, lookup_min) if compare else None
        target = load_model(EMBEDDED_ID) if compare else None
        config = _config(server, tokens, {item.workload: decoding_name(item.temperature) for item in prompts})
        results, rows = [], []
        for i, item in enumerate(prompts):
            status = f"Sending prompt {i + 1} of {len(prompts)}: {item.workload} / {item.name}…"
            yield _outputs(config, rows, status, done=False)
            prompt = ServedPrompt(item.workload, item.name, item.text, item.temperature)
            results.append(check_prompt(server, prompt, tokens, RUN_SECONDS, baseline))
            rows.append(_row(results[-1], target, lookup, tokens))
    yield _outputs(config, rows, _report(by_workload(results), rows), done=True)


def _config(server: ServerClient, tokens: int, decoding: dict[str, str]) -> CheckConfig:
    """What the check ran with; the server's address stays out of it (it may be private to its owner)."""
    k = draft_length(server) or 0
    drafter = "the server's own speculative method" if k else "none counted by the server"
    return CheckConfig(
        server.model, drafter, k, False, tokens, 1, decoding, SERVER_CPU, running_commit(), SERVED_SOURCE
    )


def _outputs(config: CheckConfig, rows: list[dict], status: str, done: bool) -> tuple:
    chart = server_charts.server_figure(rows) if rows else gr.skip()
    files = _downloads(config, rows) if done else gr.skip()
    return status, _table(rows), chart, files, config.as_html(), rows, workload_handlers.picker(rows, done)


def _client(url: str, model: str, api_key: str) -> ServerClient:
    return ServerClient(server_address(url), model, api_key or "", TIMEOUT_SECONDS)


def _token_budget(max_new_tokens: object) -> int:
    tokens = number("max new tokens", max_new_tokens, integer=True)
    if not 1 <= tokens <= MAX_NEW_TOKENS:
        raise SpecDecError(f"max new tokens must be between 1 and {MAX_NEW_TOKENS} here, got {tokens}.")
    return tokens


def _lookup(server: ServerClient, lookup_max: object, lookup_min: object) -> Lookup:
    """The server's k from its counters (one per draft position); the lookup window as the user gives it."""
    k = draft_length(server)
    if k is None:
        raise SpecDecError(
            "The side by side needs the server's draft length k, read from its speculative counters, "
            "and this server exposes none: untick the side by side."
        )
    k = min(k, MAX_K)
    high, low = number("lookup max", lookup_max, integer=True), number("lookup min", lookup_min, integer=True)
    if not 1 <= low <= high <= 8:
        raise SpecDecError(f"The lookup window must satisfy 1 ≤ min ≤ max ≤ 8, got min {low}, max {high}.")
    return Lookup(k, high, low)


def _row(result, target: LoadedModel | None, lookup: Lookup | None, tokens: int) -> dict:
    """The server's figures for one prompt, its output and copy flag, and the side by side where it ran."""
    share = copy_share(result.completion.text, result.prompt.text)
    row = prompt_record(result) | {
        "decoding": decoding_name(result.prompt.temperature),
        "copy_share": None if share is None else round(share, 3),
        "copies_prompt": copies_prompt(share),
        "prompt_text": result.prompt.text,
        "output": result.completion.text,
    }
    ids = result.completion.token_ids
    if target is not None and lookup is not None and ids and result.prompt.temperature == 0:
        row |= comparison_record(side_by_side(target, result.prompt.text, ids, lookup, tokens), result.counts)
    return row


def _table(rows: list[dict]) -> pd.DataFrame:
    """The rows under their headers (a DataFrame carries them to the table and the API); the columns only those
    some row holds (the side by side's where it ran)."""
    columns = [c for c in SERVER_HEADERS if any(c in row for row in rows)] or list(SERVER_HEADERS)[:7]
    data = [[_shown(row, c) for c in columns] for row in rows]
    return pd.DataFrame(data, columns=[SERVER_HEADERS[c] for c in columns], dtype=object)  # None stays None


def _shown(row: dict, column: str) -> object:
    return workload_report.copy_cell(row) if column == "copy_share" else _cell(row.get(column))


def _cell(value: object) -> object:
    return " ".join(f"{v:.2f}" for v in value) if isinstance(value, list) else value


def _report(sets: list[SetResult], rows: list[dict]) -> str:
    lines = ["**Per workload** (the server's counters summed over its prompts):"]
    for s in sets:
        lines.append(f"- **{s.workload}**: {_acceptance(s)}; {s.tokens_per_second:.1f} tokens/s{_speedup(s)}.")
    if any(s.counts is None for s in sets):
        lines.append(
            "\nThe server exposes no speculative-decoding counters: speculation is off there (or it is not vLLM); "
            "tokens per second are still measured."
        )
    lines.append(_side_by_side(rows))
    return "\n".join(line for line in lines if line)


def _acceptance(s: SetResult) -> str:
    if s.counts is None:
        return "no speculative counters"
    if not s.counts.drafts:
        return "no drafts counted"
    by_position = " / ".join(f"{a:.2f}" for a in s.counts.acceptance_by_position)
    return (
        f"acceptance {s.counts.acceptance_rate:.2f} ({s.counts.accepted} of {s.counts.draft_tokens} drafted in "
        f"{s.counts.drafts} drafts), {s.counts.tokens_per_pass:.2f} tokens per target pass, by position {by_position}"
    )


def _speedup(s: SetResult) -> str:
    if s.speedup is None:
        return f": {s.verdict}"
    spread = f", each prompt {min(s.speedups):.2f}× to {max(s.speedups):.2f}×" if len(s.speedups) > 1 else ""
    return f"; {s.speedup:.2f}× over the baseline server{spread}: {s.verdict}"


def _side_by_side(rows: list[dict]) -> str:
    compared = [r for r in rows if "identical" in r]
    if not compared:
        return ""
    same = sum(r["identical"] for r in compared)
    counted_alike = sum(r["same_counts"] for r in compared)
    ours = [r["ours_tokens_per_pass"] for r in compared if r["ours_tokens_per_pass"] is not None]
    served = [r["tokens_per_pass"] for r in compared if r["tokens_per_pass"] is not None]
    lines = [
        f"\n**Beside this engine's n-gram drafter** (greedy, same k and lookup window): {same} of {len(compared)} "
        f"outputs identical token by token, {counted_alike} drafted and accepted alike draft for draft (an answer "
        f"cut by the token budget may differ in its last draft: vLLM drafts k there, this engine what the budget "
        f"leaves); tokens per pass {_mean(served)} on the server, {_mean(ours)} here."
    ]
    for r in compared:
        if not r["identical"]:
            lines.append(
                f"- {r['prompt']}: part at token {r['parting_position']}: the server's token has p = "
                f"{_p(r['p_server_token'])}, ours p = {_p(r['p_our_token'])} under this engine's target."
            )
    return "\n".join(lines)


def _mean(values: list[float]) -> str:
    return f"{sum(values) / len(values):.2f}" if values else "n/a"


def _p(value: float | None) -> str:
    return "n/a (the answer ended)" if value is None else f"{value:.3f}"


def _downloads(config: CheckConfig, rows: list[dict]) -> list[str]:
    """server_check.csv (one row per prompt, the configuration in columns) and server_check.json
    ({"config", "prompts"}); neither holds the server's address nor the key."""
    folder = Path(tempfile.mkdtemp(prefix="server-check-"))
    json_path, csv_path = folder / "server_check.json", folder / "server_check.csv"
    report = {"config": config.as_dict(), "prompts": rows}
    json_path.write_text(json.dumps(report, indent=2, ensure_ascii=False), encoding="utf-8")
    fields = [*dict.fromkeys(field for row in rows for field in row), *config.columns()]
    with csv_path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        writer.writerows({key: _cell(value) for key, value in row.items()} | config.columns() for row in rows)
    return [str(csv_path), str(json_path)]

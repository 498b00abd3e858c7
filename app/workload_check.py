"""The workload check's one entry: its source, this app's engine or a served model, picks the handler. Both
yield the tab's outputs (status, table, chart, downloads, configuration, rows, output picker)."""

from __future__ import annotations

from collections.abc import Iterator

import pandas as pd

from . import server_handlers, workload_handlers
from .server_handlers import ENGINE, SERVER
from .workload_report import COLUMN_HEADERS, TABLE_COLUMNS


def run_check(
    sets: list[str],
    own_prompts: str,
    own_temperature: float,
    target: str,
    drafter: str,
    k: float,
    adaptive: bool,
    max_new_tokens: float,
    repeats: float = workload_handlers.DEFAULT_REPEATS,
    source: str = ENGINE,
    base_url: str = "",
    model: str = "",
    api_key: str = "",
    baseline_url: str = "",
    compare: bool = False,
    lookup_max: float = 3,
    lookup_min: float = 1,
) -> Iterator[tuple]:
    """A served model's check ignores the Race tab's target, drafter, k and the repeats: the server decides
    what runs, and each prompt is sent once."""
    if source == SERVER:
        server = (base_url, model, api_key, baseline_url, compare, lookup_max, lookup_min)
        yield from server_handlers.run_server_check(sets, own_prompts, own_temperature, max_new_tokens, *server)
        return
    engine = workload_handlers.run_workload(
        sets, own_prompts, own_temperature, target, drafter, k, adaptive, max_new_tokens, repeats
    )
    for status, table, *rest in engine:
        yield status, _engine_table(table), *rest


def _engine_table(table: object) -> object:
    """The engine's rows under the engine's headers: a bare list would keep the headers a server check left."""
    if not isinstance(table, list):
        return table
    return pd.DataFrame(table, columns=[COLUMN_HEADERS[c] for c in TABLE_COLUMNS], dtype=object)

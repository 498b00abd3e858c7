"""The workload check's results: the configuration in the page, CSV and JSON; the copy flag; medians and
spreads over repeats, and a best k that says when it is within noise of the next."""

import csv
import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from app.check_config import CheckConfig, running_commit
from app.copying import COPY_THRESHOLD, copies_prompt, copy_share
from app.repeats import Spread, best_k_line, best_of
from app.workload_handlers import SWEEP_COLUMNS, run_sweep, run_workload, show_output
from app.workload_report import TABLE_COLUMNS, prompt_row, table, write_downloads
from app.workloads import WorkloadPrompt
from specdec_core import DRAFT_NGRAM, EMBEDDED_ID

GERMAN = "Übersetze ins Englische: Der schnelle braune Fuchs springt über den faulen Hund und läuft in den Wald."
CONFIG = CheckConfig(
    target="some/target",
    drafter="ngram",
    k=3,
    adaptive=False,
    max_new_tokens=32,
    repeats=3,
    decoding={"custom": "greedy"},
    cpu="AMD EPYC, AVX2 only, 2 threads",
    commit="abc1234",
)


@dataclass(frozen=True)
class Run:
    """What a source reports of one run (workload_report.RunSummary)."""

    tokens: int
    tokens_per_second: float
    acceptance_rate: float | None = 0.5
    mean_accepted_length: float = 2.0


def made_up_row(output: str, prompt: str = GERMAN, speeds: tuple[float, ...] = (10.0, 12.0, 11.0)) -> dict:
    item = WorkloadPrompt("custom", "translate", prompt, 0.0)
    plain = [Run(20, 10.0) for _ in speeds]
    spec = [Run(20, s) for s in speeds]
    return prompt_row(item, plain, spec, output, identical=True)


def test_an_output_that_copies_the_prompt_is_flagged():
    copied = "Der schnelle braune Fuchs springt über den faulen Hund und läuft in den Wald."
    share = copy_share(copied, GERMAN)
    assert share == 1.0 and copies_prompt(share)


def test_an_original_answer_is_not_flagged():
    answer = "The quick brown fox jumps over the lazy dog and runs into the forest."
    share = copy_share(answer, GERMAN)
    assert share == 0.0 and not copies_prompt(share)


def test_a_partial_copy_is_flagged_only_above_the_threshold():
    prompt = "one two three four five six seven eight"
    half = "one two three four five six seven eight and then nothing from it at all here"
    share = copy_share(half, prompt)
    assert share == pytest.approx(5 / 13)  # 5 of its 13 4-grams lie inside the prompt
    assert share < COPY_THRESHOLD and not copies_prompt(share)


def test_an_output_too_short_for_a_4_gram_is_not_judged():
    assert copy_share("Yes, blue.", GERMAN) is None
    assert not copies_prompt(None)


def test_a_row_holds_the_median_speedup_its_spread_and_the_copy_flag():
    row = made_up_row("Der schnelle braune Fuchs springt über den faulen Hund.")
    assert (row["speedup"], row["speedup_min"], row["speedup_max"], row["repeats"]) == (1.1, 1.0, 1.2, 3)
    assert row["copies_prompt"] is True and row["copy_share"] == 1.0
    cells = dict(zip(TABLE_COLUMNS, table([row])[0], strict=True))
    assert cells["spread"] == "1.00–1.20" and cells["copy_share"] == "100% ⚠ copies"
    assert cells["output_start"].startswith("Der schnelle braune Fuchs")


def test_the_csv_carries_the_configuration_and_the_copy_flag():
    rows = [made_up_row("Der schnelle braune Fuchs springt über den faulen Hund."), made_up_row("A fox jumps.")]
    csv_path, json_path = map(Path, write_downloads(CONFIG, rows))
    with csv_path.open(newline="", encoding="utf-8") as f:
        read = list(csv.DictReader(f))
    assert len(read) == 2
    for line in read:
        assert line["target"] == "some/target" and line["drafter"] == "ngram" and line["k"] == "3"
        assert line["adaptive"] == "False" and line["max_new_tokens"] == "32" and line["repeats"] == "3"
        assert line["cpu"] == CONFIG.cpu and line["commit"] == "abc1234" and line["decoding"] == "greedy"
    assert [line["copies_prompt"] for line in read] == ["True", "False"]
    assert read[0]["copy_share"] == "1.0" and read[1]["copy_share"] == ""  # too short to judge
    report = json.loads(json_path.read_text(encoding="utf-8"))
    assert report["config"] == CONFIG.as_dict()
    assert report["prompts"][0]["copies_prompt"] is True
    assert report["workloads"][0]["copying_outputs"] == 1


def test_the_config_block_names_every_setting():
    shown = CONFIG.as_html()
    for text in ("some/target", "ngram", "3 (fixed)", "32", "greedy", CONFIG.cpu, "abc1234"):
        assert text in shown


def test_the_running_commit_is_a_short_hash_or_unknown():
    commit = running_commit()
    assert commit == "unknown" or len(commit.removesuffix("-dirty")) >= 7


def test_spreads_that_overlap_leave_the_best_k_within_noise():
    measured = {1: Spread(1.50, 1.40, 1.62, 3), 2: Spread(1.55, 1.45, 1.60, 3), 3: Spread(1.20, 1.15, 1.25, 3)}
    best = best_of(measured)
    assert best.setting == 2 and [k for k, _ in best.rivals] == [1] and not best.certain
    line = best_k_line(best)
    assert line.startswith("Best k = 2:") and "within noise of k = 1" in line and "k = 3" not in line


def test_spreads_apart_make_the_best_k_certain():
    best = best_of({1: Spread(1.2, 1.1, 1.3, 3), 2: Spread(1.6, 1.5, 1.7, 3)})
    assert best.setting == 2 and best.certain
    assert "overlaps no other k" in best_k_line(best)


def test_one_repeat_cannot_tell_noise_from_a_difference():
    best = best_of({1: Spread.of([1.2]), 2: Spread.of([1.3])})
    assert best.setting == 2 and "use 2 or more repeats" in best_k_line(best)


@pytest.mark.slow
def test_a_real_check_with_repeats_reports_medians_spreads_outputs_and_its_config():
    prompts = "Repeat exactly: alpha beta gamma delta epsilon zeta.\nWrite one word: blue."
    *_, final = run_workload(["custom"], prompts, 0.0, EMBEDDED_ID, DRAFT_NGRAM, 3, False, 8, 2)
    status, shown, chart, files, config, rows, picker = final
    assert len(rows) == 2 and all(row["repeats"] == 2 for row in rows)
    for row in rows:
        assert row["speedup_min"] <= row["speedup"] <= row["speedup_max"] and row["identical"] is True
        share = copy_share(row["output"], row["prompt_text"])
        assert row["output"] and row["copy_share"] == (None if share is None else round(share, 3))
    assert [r[TABLE_COLUMNS.index("speedup")] for r in shown] == [row["speedup"] for row in rows]
    assert "ngram" in config and "8" in config and "greedy" in config
    with Path(next(f for f in files if f.endswith(".csv"))).open(newline="", encoding="utf-8") as f:
        read = list(csv.DictReader(f))
    assert [line["drafter"] for line in read] == ["ngram", "ngram"] and {"copies_prompt", "commit"} <= set(read[0])
    assert [label for label, _ in picker["choices"]][1].startswith("custom / #2")
    note, prompt, output = show_output(0, rows)
    assert prompt == rows[0]["prompt_text"] and output == rows[0]["output"] and "copied" in note


@pytest.mark.slow
def test_a_real_k_sweep_with_repeats_reports_medians_with_spreads():
    *_, (status, chart, shown) = run_sweep("Repeat exactly: one two three four five.", EMBEDDED_ID, DRAFT_NGRAM, 8, 2)
    assert [row[0] for row in shown] == list(range(1, 9))
    spread = SWEEP_COLUMNS.index("spread")
    for row in shown:
        low, high = map(float, row[spread].split("–"))
        assert low - 0.005 <= row[SWEEP_COLUMNS.index("speedup")] <= high + 0.005  # the spread shown to 2 places
    assert status.startswith("Best k = ") and "over 2 repeats" in status

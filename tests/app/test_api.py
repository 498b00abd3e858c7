"""The launched app driven through gradio_client on the embedded default, as a script would use it."""

import json
import re

import pytest

from app.views import AFTER_END
from app.workload_report import COLUMN_HEADERS
from specdec_core import DRAFT_BF16, DRAFT_NGRAM, EMBEDDED_ID
from specdec_core.drafters import DRAFT_EAGLE, DRAFT_EAGLE_TREE, DRAFT_HYBRID
from tests.app.conftest import values

pytestmark = pytest.mark.slow
RACE_DEFAULTS = dict(
    target=EMBEDDED_ID,
    drafter=DRAFT_NGRAM,
    k=3,
    adaptive=False,
    decoding="greedy",
    temperature=1.0,
    top_k=0,
    top_p=1.0,
    seed=0,
    max_new_tokens=32,
)
TREE_TITLE = re.compile(r"Step (\d+) of (\d+) with a draft: a \w+ of (\d+) tokens<br>\(.*\), (\d+) accepted")


def race(client, **overrides):
    prompt = overrides.pop("prompt", "List three colours as a JSON array.")
    return client.predict(prompt=prompt, **{**RACE_DEFAULTS, **overrides}, api_name="/race")


def traces(plot: dict) -> dict[str, dict]:
    """A gr.Plot output as the client returns it ({"type": "plotly", "plot": the figure's JSON}): its named traces."""
    assert plot["type"] == "plotly"
    return {trace["name"]: trace for trace in json.loads(plot["plot"])["data"] if "name" in trace}


def markers(nodes: dict[str, dict], *names: str) -> int:
    """How many points the traces of these names (those present) draw."""
    return sum(len(values(nodes[name]["x"])) for name in names if name in nodes)


def test_race_returns_both_panes_and_identical_greedy_outputs(client):
    plain_pane, spec_pane, plot, summary, details, tree, rule, tree_step = race(client, drafter=DRAFT_BF16)
    assert "tok-accepted" in spec_pane
    assert "target only" in plain_pane and "speculative" in spec_pane
    assert details["identical"] is True
    assert details["plain_tokens"] == details["spec_tokens"] and len(details["plain_tokens"]) > 0
    assert details["spec"]["target_passes"] < details["plain"]["target_passes"]
    assert "✔ identical" in summary
    charts = traces(plot)
    accepted, drafted = values(charts["accepted"]["y"]), values(charts["drafted"]["y"])  # per drafting step
    assert values(charts["accepted"]["x"]) == list(range(1, len(accepted) + 1))
    assert sum(accepted) == details["spec"]["accepted"] and sum(drafted) == details["spec"]["drafted"]
    for side, label in (("plain", "target only"), ("spec", "speculative")):  # tokens/s on its own clock, at its end
        assert values(charts[label]["y"])[-1] == pytest.approx(details[side]["tokens_per_second"])


def test_race_with_the_trained_head_is_identical_and_shows_both_outcomes(client):
    plain_pane, spec_pane, _, summary, details, *_ = race(
        client,
        drafter=DRAFT_EAGLE,
        k=4,
        max_new_tokens=64,
        prompt="Write a short story about a fox who learns to fly. Keep it to one paragraph.",
    )
    assert details["identical"] is True
    assert "tok-accepted" in spec_pane and "tok-marker" in spec_pane  # the head is right and wrong
    assert "tok-rejected" not in spec_pane  # refused drafts are one marker per step unless shown inline
    assert 0 < details["spec"]["accepted"] < details["spec"]["drafted"]


@pytest.mark.parametrize("drafter", [DRAFT_EAGLE_TREE, DRAFT_HYBRID])
def test_tree_drafters_race_identically_and_return_the_tree_view(client, drafter):
    *_, details, tree, rule, tree_step = race(
        client,
        drafter=drafter,
        k=3,
        max_new_tokens=48,
        prompt="Rename the variable x to total in: x = 1\nx = x + 2\nprint(x)",
    )
    assert details["identical"] is True
    assert details["spec"]["target_passes"] < details["plain"]["target_passes"]
    step = tree_step["value"] if isinstance(tree_step, dict) else tree_step  # a slider update: its value
    assert step > 1
    title = json.loads(tree["plot"])["layout"]["title"]["text"]
    shown, total, drafted, accepted = map(int, TREE_TITLE.match(title).groups())
    assert shown == total == step  # the tree and the slider both sit on the newest drafted step
    nodes = traces(tree)
    assert markers(nodes, "accepted", AFTER_END, "rejected", "unverified") == drafted  # one per drafted node
    assert markers(nodes, "accepted", AFTER_END) == accepted


def test_race_streams_intermediate_updates(client):
    job = client.submit(
        prompt="Count from one to ten in words.", **{**RACE_DEFAULTS, "max_new_tokens": 24}, api_name="/race"
    )
    updates = list(job)
    assert len(updates) > 3  # one update per step, not one at the end


@pytest.mark.parametrize(
    "overrides, message",
    [
        (dict(prompt="   "), "prompt is empty"),
        (dict(prompt="x" * 9000), "the limit is 8,000"),
        (dict(k=0), "less than minimum value 1"),
        (dict(k="many"), "Could not preprocess input component at index 3"),
        (dict(top_p=0), "less than minimum value 0.05"),
        (dict(decoding="sampling", temperature=-1), "less than minimum value 0.05"),
        (dict(decoding="banana"), "not in the list of choices"),
        (dict(max_new_tokens=100000), "greater than maximum value 256"),
        (dict(target="no-such-org/no-such-model"), "cannot be reached"),
        (dict(target="Qwen/Qwen2.5-1.5B-Instruct"), "cannot be reached"),
        (dict(drafter="eagle:no-such-head"), "draft head 'no-such-head' is missing"),
        (dict(drafter="eagle:../../etc"), "not a draft head name"),
    ],
)
def test_bad_input_gets_a_clear_message_and_the_app_keeps_working(client, overrides, message):
    with pytest.raises(Exception, match=message):
        race(client, **overrides)


def test_unicode_and_markup_in_the_prompt_are_rendered_safely(client):
    prompt = 'Répète: "<script>alert(1)</script>" \x00\x1b[31m ✓ 日本語 <img src=x onerror=alert(2)>'
    plain_pane, spec_pane, _, summary, details, *_ = race(client, prompt=prompt, max_new_tokens=24)
    for html in (plain_pane, spec_pane, summary):
        assert "<script" not in html and "<img" not in html
    assert details["identical"] is True


def test_app_still_works_after_errors(client):
    details = race(client, max_new_tokens=8)[4]
    assert details["identical"] is True


def test_workload_check_reports_each_prompt(client):
    status, table, chart, files, *_ = client.predict(
        sets=["custom"],
        own_prompts="Repeat exactly: alpha beta gamma delta.\nWrite one word: blue.",
        own_temperature=0.0,
        target=EMBEDDED_ID,
        drafter=DRAFT_NGRAM,
        k=3,
        adaptive=False,
        max_new_tokens=16,
        api_name="/workload_check",
    )
    rows = table["data"]
    assert len(rows) == 2
    headers = table["headers"]  # the words shown above each field
    assert all(row[headers.index(COLUMN_HEADERS["identical"])] is True for row in rows)
    assert all(row[headers.index(COLUMN_HEADERS["speedup"])] > 0 for row in rows)
    assert "custom" in status and "measure yours both ways" in status
    speedups = [row[headers.index(COLUMN_HEADERS["speedup"])] for row in rows]
    low, high = sorted(speedups)
    assert f"each prompt {low:.2f}× to {high:.2f}×" in status
    bars = traces(chart)["custom"]  # the speedup bars, one per prompt, named by its workload
    assert values(bars["x"]) == [row[headers.index(COLUMN_HEADERS["prompt"])] for row in rows]
    assert values(bars["y"]) == speedups
    assert sorted(f.rsplit(".", 1)[-1] for f in files) == ["csv", "json"]


def test_spec_bench_sets_run_through_the_workload_check(client):
    status, table, chart, files, *_ = client.predict(
        sets=["spec_bench:qa", "spec_bench:summarization"],
        own_prompts="",
        own_temperature=0.0,
        target=EMBEDDED_ID,
        drafter=DRAFT_EAGLE,
        k=3,
        adaptive=False,
        max_new_tokens=12,
        repeats=1,  # repeats are checked on two short prompts above and in test_workload.py
        api_name="/workload_check",
    )
    rows, headers = table["data"], table["headers"]
    workloads = [row[headers.index(COLUMN_HEADERS["workload"])] for row in rows]
    assert workloads == ["spec_bench:qa"] * 3 + ["spec_bench:summarization"] * 3
    assert all(row[headers.index(COLUMN_HEADERS["identical"])] is True for row in rows)
    assert all(row[headers.index(COLUMN_HEADERS["mean_accepted_length"])] >= 1 for row in rows)
    assert "spec_bench:qa" in status and "spec_bench:summarization" in status


def test_k_sweep_reports_k_1_to_8_and_the_best(client):
    status, chart, table = client.predict(
        prompt="Repeat exactly: alpha beta gamma delta epsilon.",
        target=EMBEDDED_ID,
        drafter=DRAFT_NGRAM,
        max_new_tokens=8,
        api_name="/k_sweep",
    )
    assert [row[0] for row in table["data"]] == list(range(1, 9))
    assert all(row[1] > 0 for row in table["data"])
    best = max(table["data"], key=lambda row: row[1])
    assert status.startswith(f"Best k = {best[0]}:")
    lines = traces(chart)
    assert values(lines["speedup"]["x"]) == list(range(1, 9))
    assert values(lines["speedup"]["y"]) == [row[1] for row in table["data"]]
    assert values(lines["acceptance rate"]["y"]) == [row[2] or 0 for row in table["data"]]
    assert values(lines["best k"]["x"]) == [best[0]] and values(lines["best k"]["y"]) == [best[1]]

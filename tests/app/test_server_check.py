"""The workload check with a served model as its source, through the app's API: against a live vLLM serving the
embedded model with n-gram speculation (tests/conftest.py), and the failures a user meets, each a message while
the app keeps serving."""

import json
from pathlib import Path

import pytest

from app import server_handlers
from app.server_handlers import SERVER_HEADERS
from specdec_core import DRAFT_NGRAM, EMBEDDED_ID
from tests.conftest import STAND_IN_MODEL, loopback_port

pytestmark = pytest.mark.slow
KEY = "sk-live-test-never-shown"
ENGINE_INPUTS = dict(own_temperature=0.0, target=EMBEDDED_ID, drafter=DRAFT_NGRAM, k=3, adaptive=False)


def server_check(client, url, model, **overrides):
    inputs = dict(sets=["custom"], own_prompts="Repeat exactly: one two three one two three.", max_new_tokens=16)
    inputs |= dict(source="server", base_url=url, model=model, api_key=KEY, baseline_url="", compare=False)
    return client.predict(**ENGINE_INPUTS, **inputs | overrides, api_name="/workload_check")


def curve(chart: dict, name: str) -> list:
    """The y values of a named trace of a gr.Plot output (the figure's JSON; lists of Python floats stay lists)."""
    return next(t["y"] for t in json.loads(chart["plot"])["data"] if t.get("name") == name)


def column(table: dict, field: str) -> list:
    return [row[table["headers"].index(SERVER_HEADERS[field])] for row in table["data"]]


def test_spec_bench_against_vllm_with_this_engine_beside_it(client, vllm_server):
    status, table, chart, files, config, *_ = server_check(
        client,
        vllm_server.url,
        vllm_server.model,
        sets=["spec_bench:summarization"],
        max_new_tokens=24,
        compare=True,
        lookup_max=vllm_server.speculation["prompt_lookup_max"],
        lookup_min=vllm_server.speculation["prompt_lookup_min"],
    )
    assert column(table, "workload") == ["spec_bench:summarization"] * 3
    assert all(0 <= rate <= 1 for rate in column(table, "acceptance_rate"))
    assert all(passes >= 1 for passes in column(table, "tokens_per_pass") + column(table, "ours_tokens_per_pass"))
    assert all(tokens > 0 for tokens in column(table, "tok_s"))
    assert all(isinstance(same, bool) for same in column(table, "identical"))
    assert "**spec_bench:summarization**: acceptance" in status and "tokens per target pass" in status
    assert "Beside this engine's n-gram drafter" in status and "outputs identical token by token" in status
    assert len(curve(chart, "server")) == len(curve(chart, "this engine's n-gram")) == 4  # k = 4
    report = json.loads(Path(next(f for f in files if f.endswith(".json"))).read_text())
    assert [r["prompt"] for r in report["prompts"]] == column(table, "prompt")
    assert report["config"]["target"] == vllm_server.model and report["config"]["k"] == 4
    assert all(r["output"] and "copies_prompt" in r for r in report["prompts"])
    assert "a served model" in config and vllm_server.model in config
    for shown in (status, config, json.dumps(table), *(Path(f).read_text() for f in files)):
        assert KEY not in shown and "127.0.0.1" not in shown  # neither the key nor the address is written out


def test_a_baseline_server_gives_a_speedup_and_a_verdict(client, vllm_server):
    status, table, *_ = server_check(client, vllm_server.url, vllm_server.model, baseline_url=vllm_server.url)
    (speedup,) = column(table, "speedup")
    assert speedup > 0
    assert "over the baseline server" in status
    assert any(verdict in status for verdict in ("speculation pays", "a wash", "no gain: leave it off"))


def test_a_server_without_speculation_still_gives_tokens_per_second(client, openai_stand_in):
    status, table, *_ = server_check(client, f"{openai_stand_in}/plain/v1", STAND_IN_MODEL)
    assert column(table, "tok_s")[0] > 0 and column(table, "acceptance_rate") == [None]
    assert "exposes no speculative-decoding counters" in status


@pytest.fixture
def short_timeout(monkeypatch):
    monkeypatch.setattr(server_handlers, "TIMEOUT_SECONDS", 1.0)  # the app runs in this process


@pytest.mark.parametrize(
    "path, model, message",
    [
        ("down", STAND_IN_MODEL, "Nothing answers at http://127.0.0.1:"),
        ("/slow/v1", STAND_IN_MODEL, r"did not answer within 1 s \(timeout\)"),
        ("/html/v1", STAND_IN_MODEL, "not an OpenAI chat completion"),
        ("/plain/v1", "gpt-7", "The server has no model named 'gpt-7'; it serves: 'stand-in'"),
    ],
)
def test_failures_give_a_message_and_the_app_serves_on(client, openai_stand_in, short_timeout, path, model, message):
    url = f"http://127.0.0.1:{loopback_port()}/v1" if path == "down" else openai_stand_in + path
    with pytest.raises(Exception, match=message) as raised:
        server_check(client, url, model)
    assert KEY not in str(raised.value)
    status, table, *_ = server_check(client, f"{openai_stand_in}/plain/v1", STAND_IN_MODEL)
    assert column(table, "tok_s")[0] > 0


def test_in_public_mode_the_server_source_is_off_without_an_allowlist(client, openai_stand_in, monkeypatch):
    monkeypatch.setenv("SPECDEC_PUBLIC", "1")
    monkeypatch.delenv("SPECDEC_SERVER_ALLOWLIST", raising=False)
    with pytest.raises(Exception, match="only the servers its owner listed in SPECDEC_SERVER_ALLOWLIST"):
        server_check(client, f"{openai_stand_in}/plain/v1", STAND_IN_MODEL)
    monkeypatch.setenv("SPECDEC_SERVER_ALLOWLIST", f"{openai_stand_in}/plain/v1")
    with pytest.raises(Exception, match="never loopback, link-local or private addresses"):
        server_check(client, f"{openai_stand_in}/plain/v1", STAND_IN_MODEL)  # listed, but on loopback

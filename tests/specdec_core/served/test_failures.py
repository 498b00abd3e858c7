"""The failures a user meets pointing the check at a server, each a one-line message: nothing listening, a server
that is too slow, a web page instead of the API, a server without speculation (answers, but no counters), and an
error that repeats the API key (the message must not). The OpenAI-compatible stand-in (tests/conftest.py) shows
those a real vLLM cannot show cheaply; wrong model names are tested against vLLM itself (test_live_server.py)."""

import time

import pytest

from specdec_core.served.addresses import server_address
from specdec_core.served.check import ServedPrompt, check_prompt, prompt_record
from specdec_core.served.client import ServerClient
from specdec_core.served.errors import ServerError
from tests.conftest import STAND_IN_MODEL, STAND_IN_SLOW_SECONDS, loopback_port

PROMPT = ServedPrompt("custom", "#1", "Say hello.", 0.0)
KEY = "sk-test-d0-not-repeat-me"


def client(url: str, model: str = STAND_IN_MODEL, timeout: float = 10.0) -> ServerClient:
    return ServerClient(server_address(url), model, KEY, timeout)


def one_line_error(url: str, model: str = STAND_IN_MODEL, timeout: float = 10.0) -> str:
    with client(url, model, timeout) as server, pytest.raises(ServerError) as raised:
        check_prompt(server, PROMPT, 16, 30.0)
    message = str(raised.value)
    assert "\n" not in message and KEY not in message
    return message


def test_nothing_listening():
    url = f"http://127.0.0.1:{loopback_port()}/v1"
    assert "Nothing answers at http://127.0.0.1:" in one_line_error(url)


def test_a_slow_server_times_out_with_a_clear_message(openai_stand_in):
    started = time.monotonic()
    assert (
        one_line_error(f"{openai_stand_in}/slow/v1", timeout=1.0) == "The server did not answer within 1 s (timeout)."
    )
    assert time.monotonic() - started < STAND_IN_SLOW_SECONDS


def test_a_web_page_is_not_an_openai_response(openai_stand_in):
    message = one_line_error(f"{openai_stand_in}/html/v1")
    assert message.endswith("not an OpenAI chat completion stream with usage.")


def test_an_error_that_repeats_the_key_is_not_repeated(openai_stand_in):
    assert one_line_error(f"{openai_stand_in}/echo/v1") == "The server answered HTTP 400 to a chat completion."


def test_a_wrong_model_name_names_the_models_served(openai_stand_in):
    message = one_line_error(f"{openai_stand_in}/plain/v1", model="gpt-7")
    assert message == f"The server has no model named 'gpt-7'; it serves: '{STAND_IN_MODEL}'."


def test_a_server_without_speculation_still_gives_tokens_per_second(openai_stand_in):
    with client(f"{openai_stand_in}/plain/v1") as server:
        result = check_prompt(server, PROMPT, 16, 30.0)
    assert result.counts is None  # its /metrics page has no speculative counters
    assert result.completion.text == "Hello there!" and result.completion.completion_tokens == 3
    record = prompt_record(result)
    assert record["tok_s"] > 0 and record["drafts"] is None and record["acceptance_rate"] is None
    assert KEY not in repr(record) and KEY not in repr(server.__dict__.get("model"))


def test_no_model_name_is_refused_before_anything_is_sent():
    with pytest.raises(ServerError, match="No model name given"):
        ServerClient(server_address("http://127.0.0.1:9/v1"), "  ")

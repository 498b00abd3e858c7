"""One streamed chat completion from an OpenAI-compatible server, timed, and the server's counters around it.

The `openai` package speaks the API (streaming, errors by status); httpx reads /metrics. Neither follows
redirects, so a server cannot send the check on to an address the public-mode rule would refuse. The API key is
sent as the bearer token to the API only, never to /metrics, and no message repeats it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import httpx
import openai

from .addresses import ServerAddress
from .errors import ServerError
from .metrics import SpecCounters, counters_in_response, read_counters

# vLLM's extra request field: each streamed chunk carries the ids of its tokens (ignored by servers without it).
TOKEN_IDS = {"return_token_ids": True}


@dataclass(frozen=True, slots=True)
class Completion:
    """One streamed answer: its text, its tokens as the server counted them, and when they arrived."""

    text: str
    token_ids: tuple[int, ...] | None  # where the server returns them (vLLM's return_token_ids)
    prompt_token_ids: tuple[int, ...] | None  # the chat-templated prompt as the server tokenized it, likewise
    completion_tokens: int  # the usage the server reported at the end of the stream
    first_token_seconds: float  # from sending the request to the first chunk with text
    seconds: float  # from sending the request to the end of the stream
    finish_reason: str | None
    counts: SpecCounters | None = None  # this request's speculative counts, where the response carries them

    @property
    def tokens_per_second(self) -> float:
        """Completion tokens over the whole request, as a client sees it (time to first token included)."""
        return self.completion_tokens / self.seconds if self.seconds > 0 else 0.0


class ServerClient:
    """A server at one address serving one model: streamed chat completions and its speculative counters."""

    def __init__(self, address: ServerAddress, model: str, api_key: str = "", timeout: float = 60.0) -> None:
        if not isinstance(model, str) or not model.strip():
            raise ServerError("No model name given: type the name the server serves the model under.")
        self.address = address
        self.model = model.strip()
        self.timeout = timeout
        self._metrics = httpx.Client(timeout=timeout, follow_redirects=False)
        self._api = openai.OpenAI(
            base_url=address.api_base,
            api_key=api_key or "none",  # the package insists on one; servers started without a key ignore it
            timeout=timeout,
            max_retries=0,  # a failure is reported at once, not after retries
            http_client=httpx.Client(timeout=timeout, follow_redirects=False),
        )

    def __enter__(self) -> ServerClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self._metrics.close()
        self._api.close()

    def counters(self) -> SpecCounters | None:
        return read_counters(self._metrics, self.address.metrics_url, self.model)

    def complete(self, prompt: str, max_tokens: int, temperature: float, max_seconds: float) -> Completion:
        """The prompt as one user turn, answered in a stream; raises ServerError with a one-line message."""
        try:
            return self._stream(prompt, max_tokens, temperature, max_seconds)
        except ServerError:  # already one line (a ValueError, so it must pass before the catch-all below)
            raise
        except openai.APITimeoutError:
            raise ServerError(f"The server did not answer within {self.timeout:g} s (timeout).") from None
        except openai.APIConnectionError:
            raise ServerError(f"Nothing answers at {self.address.root}: is the server running there?") from None
        except openai.NotFoundError:
            raise ServerError(self._not_found()) from None
        except openai.AuthenticationError:
            raise ServerError("The server refused the API key (HTTP 401).") from None
        except openai.APIStatusError as error:
            raise ServerError(f"The server answered HTTP {error.status_code} to a chat completion.") from None
        except (openai.APIError, ValueError, AttributeError, TypeError):
            # A stream of something else than chat completion chunks: bad JSON (ValueError), chunks without
            # their fields (AttributeError, TypeError); the server's words are not repeated.
            raise ServerError(f"The answer from {self.address.root} is not an OpenAI chat completion.") from None

    def _stream(self, prompt: str, max_tokens: int, temperature: float, max_seconds: float) -> Completion:
        started = time.perf_counter()
        stream = self._api.chat.completions.create(
            model=self.model,
            messages=[{"role": "user", "content": prompt}],
            max_tokens=max_tokens,
            temperature=temperature,
            stream=True,
            stream_options={"include_usage": True},
            extra_body=TOKEN_IDS,
        )
        text: list[str] = []
        ids: list[int] = []
        first = usage = finish = prompt_ids = counts = None
        with stream:
            for chunk in stream:
                prompt_ids = prompt_ids or getattr(chunk, "prompt_token_ids", None)
                if chunk.usage is not None:
                    usage = chunk.usage.completion_tokens
                    counts = counters_in_response(getattr(chunk, "metrics", None))  # on the usage chunk
                for choice in chunk.choices:
                    if choice.delta.content:
                        first = first if first is not None else time.perf_counter() - started
                        text.append(choice.delta.content)
                    ids.extend(getattr(choice, "token_ids", None) or [])
                    finish = choice.finish_reason or finish
                if time.perf_counter() - started > max_seconds:
                    raise ServerError(f"The answer took over {max_seconds:g} s; stopped (timeout).")
        seconds = time.perf_counter() - started
        if usage is None:
            raise ServerError(
                f"The answer from {self.address.root} carried no token count: not an OpenAI chat completion "
                "stream with usage."
            )
        prompt_ids = tuple(prompt_ids) if prompt_ids else None
        return Completion(
            "".join(text), tuple(ids) or None, prompt_ids, usage, first or seconds, seconds, finish, counts
        )

    def _not_found(self) -> str:
        """A 404: a model name the server does not serve (then say which it does), or no such API at all."""
        try:
            served = [model.id for model in self._api.models.list()]
        except (openai.APIError, ValueError, AttributeError, TypeError):
            return f"{self.address.root} has no OpenAI chat completions API (HTTP 404)."
        shown = ", ".join(f"'{name}'" for name in served[:5]) or "none"
        return f"The server has no model named '{self.model}'; it serves: {shown}."

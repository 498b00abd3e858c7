"""A server's speculative-decoding counters from its Prometheus `/metrics` page, and their change over one prompt.

vLLM counts, since it started: drafts (target passes that verified a draft), drafted tokens, accepted tokens, and
accepted tokens by draft position. Requests are sent one at a time, so the change of each counter over a request
belongs to that request. A vLLM started with --per-request-spec-decode-metrics also returns each request's own
counts in its response (counters_in_response), which hold under concurrent traffic too. prometheus_client's
parser reads the page (it strips a counter's `_total` suffix from the family name).
"""

from __future__ import annotations

from dataclasses import dataclass

import httpx
from prometheus_client.parser import text_string_to_metric_families

from .errors import ServerError

DRAFTS = "vllm:spec_decode_num_drafts"
DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens"
ACCEPTED = "vllm:spec_decode_num_accepted_tokens"
PER_POSITION = "vllm:spec_decode_num_accepted_tokens_per_pos"
SPEC_FAMILIES = (DRAFTS, DRAFT_TOKENS, ACCEPTED, PER_POSITION)


@dataclass(frozen=True, slots=True)
class SpecCounters:
    """Counts of speculative decoding: since the server started, or (minus) over one request."""

    drafts: int
    draft_tokens: int
    accepted: int
    accepted_by_position: tuple[int, ...]  # [i]: drafts whose token at position i (from 0) was accepted

    def minus(self, before: SpecCounters) -> SpecCounters:
        positions = len(self.accepted_by_position)
        earlier = before.accepted_by_position + (0,) * (positions - len(before.accepted_by_position))
        return SpecCounters(
            self.drafts - before.drafts,
            self.draft_tokens - before.draft_tokens,
            self.accepted - before.accepted,
            tuple(now - then for now, then in zip(self.accepted_by_position, earlier)),
        )

    def plus(self, other: SpecCounters) -> SpecCounters:
        longest = max(len(self.accepted_by_position), len(other.accepted_by_position))
        mine = self.accepted_by_position + (0,) * (longest - len(self.accepted_by_position))
        theirs = other.accepted_by_position + (0,) * (longest - len(other.accepted_by_position))
        return SpecCounters(
            self.drafts + other.drafts,
            self.draft_tokens + other.draft_tokens,
            self.accepted + other.accepted,
            tuple(a + b for a, b in zip(mine, theirs)),
        )

    @property
    def acceptance_rate(self) -> float | None:
        """Accepted draft tokens over drafted tokens."""
        return self.accepted / self.draft_tokens if self.draft_tokens else None

    @property
    def tokens_per_pass(self) -> float | None:
        """Mean tokens a verifying target pass emits: its accepted drafts plus the target's own token."""
        return 1 + self.accepted / self.drafts if self.drafts else None

    @property
    def acceptance_by_position(self) -> tuple[float, ...]:
        """Accepted at position i over drafts, as vLLM's own log computes it (a draft shorter than i + 1 tokens
        counts as not accepted there)."""
        return tuple(count / self.drafts for count in self.accepted_by_position) if self.drafts else ()


NO_COUNTS = SpecCounters(0, 0, 0, ())


def parse_counters(text: str, model: str | None = None) -> SpecCounters | None:
    """The counters on a Prometheus text page, summed over engines; samples labelled with another model_name are
    left out. None when the page has none of them (a server without speculative decoding)."""
    totals: dict[str, float] = {}
    by_position: dict[int, float] = {}
    try:
        families = list(text_string_to_metric_families(text))
    except ValueError as error:
        raise ServerError(f"The server's /metrics page is not Prometheus text ({error}).") from None
    for family in families:
        if family.name not in SPEC_FAMILIES:
            continue
        for sample in family.samples:
            if sample.name.endswith("_created") or sample.labels.get("model_name", model) != model:
                continue
            if family.name == PER_POSITION:
                position = int(sample.labels.get("position", 0))
                by_position[position] = by_position.get(position, 0.0) + sample.value
            totals[family.name] = totals.get(family.name, 0.0) + sample.value
    if not totals:
        return None
    positions = tuple(int(by_position.get(i, 0)) for i in range(max(by_position, default=-1) + 1))
    return SpecCounters(
        int(totals.get(DRAFTS, 0)), int(totals.get(DRAFT_TOKENS, 0)), int(totals.get(ACCEPTED, 0)), positions
    )


def counters_in_response(metrics: object) -> SpecCounters | None:
    """One request's counts as vLLM returns them in the response (`metrics.speculative_decoding`, with
    --per-request-spec-decode-metrics; experimental there); None when absent or not in that shape. Its histogram
    holds, at j, the verifying passes that accepted exactly j drafts: position i was accepted in those with j > i."""
    stats = metrics.get("speculative_decoding") if isinstance(metrics, dict) else None
    try:
        histogram = [int(count) for count in stats["acceptance_histogram"]]
        return SpecCounters(
            int(stats["num_spec_steps"]),
            int(stats["num_draft_tokens"]),
            int(stats["num_accepted_draft_tokens"]),
            tuple(sum(histogram[i + 1 :]) for i in range(int(stats["num_spec_tokens"]))),
        )
    except (TypeError, KeyError, ValueError):
        return None


def read_counters(client: httpx.Client, metrics_url: str, model: str | None) -> SpecCounters | None:
    """The counters now; None when the server exposes no speculative counters (or no /metrics page at all)."""
    try:
        response = client.get(metrics_url)
    except httpx.TimeoutException:
        raise ServerError(f"The server's /metrics page did not answer within {client.timeout.read:g} s.") from None
    except httpx.ConnectError:
        raise ServerError(f"Nothing answers at {metrics_url}: is the server running there?") from None
    except httpx.HTTPError as error:
        raise ServerError(f"Could not read the server's /metrics page ({type(error).__name__}).") from None
    if response.status_code == 404:
        return None
    if response.status_code != 200:
        raise ServerError(f"The server's /metrics page answered HTTP {response.status_code}.")
    return parse_counters(response.text, model)

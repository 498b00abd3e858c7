"""What a workload check ran with: shown above its results and written into its CSV and JSON, so that a number
read later can be traced to the model, drafter, k, token budget, decoding, CPU and code that produced it."""

from __future__ import annotations

import html
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path

from specdec_core.machine import this_machine

from .presets import DRAFT_LABELS, preset_for

ROOT = Path(__file__).resolve().parent.parent
UNKNOWN = "unknown"
ENGINE_SOURCE = "this app's engine"
SERVED_SOURCE = "a served model"


@dataclass(frozen=True, slots=True)
class CheckConfig:
    target: str
    drafter: str
    k: int
    adaptive: bool  # the schedule then starts at k and picks each step's k (specdec_core/config.py)
    max_new_tokens: int
    repeats: int
    decoding: dict[str, str]  # per prompt set: "greedy" or "sampling, temperature T"
    cpu: str  # machine.Machine.kind
    commit: str  # the running code's short git hash, "-dirty" when it has uncommitted changes; else "unknown"
    source: str = ENGINE_SOURCE  # SERVED_SOURCE: target is the served name, k read from the server's counters

    def as_dict(self) -> dict:
        return asdict(self)

    def columns(self) -> dict:
        """The fields each CSV row repeats; decoding is per row there (its decoding and temperature columns)."""
        return {key: value for key, value in self.as_dict().items() if key != "decoding"}

    def as_html(self) -> str:
        """The header block above the results; names escaped, as a hub id is the visitor's text."""
        decoding = "; ".join(f"{name}: {how}" for name, how in self.decoding.items())
        cells = {
            "Source": self.source,
            "Target": self._target(),
            "Drafter": _named(self.drafter, DRAFT_LABELS.get(self.drafter)),
            "k": self._k(),
            "Max new tokens": str(self.max_new_tokens),
            "Repeats": f"{self.repeats} (median and min–max of each prompt's speedup)" if self.repeats > 1 else "1",
            "Decoding": decoding,
            "CPU": self.cpu,
            "Commit": self.commit,
        }
        rows = "".join(f"<tr><th>{name}</th><td>{html.escape(value)}</td></tr>" for name, value in cells.items())
        return f"<table class='summary check-config'><caption>This check ran with</caption>{rows}</table>"

    def _target(self) -> str:
        if self.source == SERVED_SOURCE:
            return f"{self.target} (as the server names it)"
        preset = preset_for(self.target)
        return _named(self.target, preset.label if preset else None)

    def _k(self) -> str:
        if self.source == SERVED_SOURCE:
            return f"{self.k} (the draft positions the server counts)" if self.k else "none counted"
        if self.adaptive:
            return f"{self.k}, adaptive (starts at {self.k}, then chosen per step)"
        return f"{self.k} (fixed)"


def check_config(
    target: str, drafter: str, k: int, adaptive: bool, max_new_tokens: int, repeats: int, decoding: dict[str, str]
) -> CheckConfig:
    """The configuration of a check run in this process, on this machine and this code."""
    return CheckConfig(
        target, drafter, k, adaptive, max_new_tokens, repeats, decoding, this_machine().kind, running_commit()
    )


def decoding_name(temperature: float) -> str:
    return "greedy" if temperature == 0 else f"sampling, temperature {temperature:g}"


def running_commit() -> str:
    """The short hash of this checkout's commit, marked -dirty when files differ from it; "unknown" where the
    code is not a git checkout (a Space holds the files alone). Never touches the network."""
    if not (ROOT / ".git").exists():
        return UNKNOWN
    try:
        done = subprocess.run(
            ["git", "-C", str(ROOT), "describe", "--always", "--dirty", "--exclude=*", "--abbrev=7"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return UNKNOWN
    return done.stdout.strip() or UNKNOWN


def _named(name: str, label: str | None) -> str:
    return f"{label} ({name})" if label else name

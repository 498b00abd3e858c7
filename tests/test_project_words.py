"""The project speaks of itself only: no tracked text names a numbered or relative work session, which no reader
can resolve; measurements are named by date, commit and CPU kind. pytest's and Gradio's sessions (a fixture
scope, a browser's connection) are other things and stay."""

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NUMBERED = re.compile(r"\bsessions?[\s#-]*\d+", re.IGNORECASE)
RELATIVE = re.compile(
    r"\b(this|last|previous|earlier|next|later|prior|current|past|future|one more|another)\s+(work\s+)?sessions?\b",
    re.IGNORECASE,
)


def project_texts() -> list[Path]:
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    texts = []
    for name in listed:
        path = ROOT / name
        if not path.is_file():
            continue  # deleted in the working tree
        try:
            path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue  # binary: shards, weights, pictures
        texts.append(path)
    return texts


WORD = "session"  # the examples below are made from it, so that this file passes its own check


def work_sessions(text: str) -> list[str]:
    return [m.group(0) for pattern in (NUMBERED, RELATIVE) for m in pattern.finditer(text)]


@pytest.mark.parametrize(
    "phrase",
    [
        "{w} 31",
        "{W}s 26-31",
        "the {w}-29 head",
        "{W} 38 notes",
        "as the previous {w} found",
        "this {w}'s code",
    ],
)
def test_the_check_catches_work_sessions(phrase):
    assert work_sessions(phrase.format(w=WORD, W=WORD.capitalize()))


@pytest.mark.parametrize(
    "phrase",
    [
        '@pytest.fixture(scope="session")',
        "a second race in the same session",
        "each session got its own tokens",
        "in the second session as he coasted home",
    ],
)
def test_the_check_leaves_other_sessions(phrase):
    assert not work_sessions(phrase)


def test_no_project_file_speaks_of_work_sessions():
    found = {str(path.relative_to(ROOT)): work_sessions(path.read_text(encoding="utf-8")) for path in project_texts()}
    assert len(found) > 50  # the listing worked
    assert {name: hits for name, hits in found.items() if hits} == {}

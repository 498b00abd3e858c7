"""python -m bench --bandwidth: plain decoding against this machine's memory-bandwidth bound, and where
a pass's time goes.

A decode step must read every weight once, so weight bytes / read bandwidth is the fastest a token
can come; the report gives plain decoding's time per token as a fraction of that bound, with the
bandwidth measured in the same run (torch.sum over 256 MB: a pure streaming read on all threads) before,
between the timed repeats and after: the neighbours of a shared VM move it from minute to minute.
It also gives the verification cost curve T(n)/T(1) that speculation's gain depends on, and a
torch.profiler breakdown by op of a one-token pass and a (k + 1)-token verification pass.
"""

from __future__ import annotations

import statistics
import time
from datetime import UTC, datetime

import torch
from torch.profiler import ProfilerActivity, profile

from specdec_core.costs import CONTEXT_TOKENS
from specdec_core.kv_cache import CachedModel
from specdec_core.machine import this_machine
from specdec_core.measurements import median_seconds
from specdec_core.models import load_model, load_stock
from specdec_core.prompts import encode_prompt, stop_token_ids
from specdec_core.sources import EMBEDDED_ID
from specdec_core.tuning import cost_curve

from .measure import bench_prompts, measure, ours, theirs
from .paths import COMPILED, LEAN, served_paths

STREAM_BYTES = 256 * 2**20


def read_bandwidth(repeats: int = 7) -> float:
    """Bytes per second of a streaming read over STREAM_BYTES (median of repeats), far larger than any cache."""
    data = torch.ones(STREAM_BYTES // 4)
    data.sum()  # first touch: page faults are not bandwidth
    seconds = []
    for _ in range(repeats):
        started = time.perf_counter()
        data.sum()
        seconds.append(time.perf_counter() - started)
    return STREAM_BYTES / statistics.median(seconds)


def weight_bytes(model: torch.nn.Module) -> int:
    """Bytes a decode step reads: every weight once (a tied embedding once, as the output layer reads it
    whole). A released dense weight (cpu_kernels.release_dense_weights) is a meta tensor of the packed
    one's shape and dtype, so it counts the bytes actually read."""
    return sum(p.numel() * p.element_size() for p in model.parameters())  # parameters() yields a shared one once


@torch.inference_mode()
def op_profile(model: torch.nn.Module, width: int, passes: int = 20, top: int = 10) -> dict:
    """Milliseconds per pass of `width` new tokens behind CONTEXT_TOKENS cached ones: wall time (median,
    unprofiled), and self CPU time by op under torch.profiler (the top ones, the rest summed, and the
    time outside any op: Python)."""
    generator = torch.Generator().manual_seed(0)
    vocab = model.config.vocab_size
    context = torch.randint(vocab, (CONTEXT_TOKENS,), generator=generator).tolist()
    new = torch.randint(vocab, (width,), generator=generator).tolist()
    cached = CachedModel(model)
    cached.forward(context)

    def one_pass() -> None:
        cached.forward(new, width)
        cached.rollback(len(context))

    wall = 1000 * median_seconds(one_pass, passes)  # unprofiled: the profiler adds its own time to every op
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(passes):
            one_pass()
    ops = sorted(
        ((e.key, e.self_cpu_time_total / 1000 / passes, e.count // passes) for e in prof.key_averages()),
        key=lambda op: -op[1],
    )
    in_ops = sum(ms for _, ms, _ in ops)
    return {
        "width": width,
        "wall_ms": wall,
        "ops": [{"op": name, "ms": ms, "calls": calls} for name, ms, calls in ops[:top]],
        "other_ops_ms": sum(ms for _, ms, _ in ops[top:]),
        "outside_ops_ms": max(0.0, wall - in_ops),  # Python between ops: unprofiled wall minus the ops' own time
    }


def bandwidth_report(args) -> dict:
    target = load_model(EMBEDDED_ID)
    stops = stop_token_ids(target.tokenizer, target.model)
    stock = load_stock(EMBEDDED_ID, torch.float32)
    before_lean = load_model(EMBEDDED_ID, for_generate=True).model  # packed kernels, transformers' forward
    weights = weight_bytes(target.model)
    paths = served_paths(target, every_width=True)  # the compiled passes' own costs at every width
    bandwidths = [read_bandwidth()]
    methods, prompts = {}, []
    for workload, item in bench_prompts(args.prompts):
        prompt, label = encode_prompt(target.tokenizer, item.text), f"{workload}: {item.text[:40]}"
        methods[f"plain {label}"] = paths.on(LEAN, ours(target.model, prompt, args.tokens, stops))
        if COMPILED in paths.available:
            methods[f"plain, compiled {label}"] = paths.on(COMPILED, ours(target.model, prompt, args.tokens, stops))
        methods[f"plain, transformers forward {label}"] = ours(before_lean, prompt, args.tokens, stops)
        methods[f"hf generate {label}"] = theirs(stock, prompt, args.tokens, stops)
        prompts.append(label)
    # read before, between the repeats and after: the bound pairs with the runs it is compared to
    timings, outputs = measure(methods, args.repeats, between=lambda: bandwidths.append(read_bandwidth()))
    bandwidth = statistics.median(bandwidths)
    bound = weights / bandwidth

    def ms_per_token(method: str) -> float:
        return 1000 * statistics.median(1 / timings[f"{method} {label}"].tokens_per_second for label in prompts)

    def identical(method: str) -> bool:
        return all(outputs[f"{method} {label}"] == outputs[f"plain {label}"] for label in prompts)

    paths.use(LEAN)
    curve, curve_before = cost_curve(target.model), cost_curve(before_lean)
    compiled = COMPILED in paths.available
    report = {
        "when": datetime.now(UTC).isoformat(),
        "machine": this_machine().as_dict(),
        "args": vars(args),
        "weight_bytes": weights,
        "read_bandwidth_gbs": [b / 1e9 for b in bandwidths],
        "bandwidth_gbs": bandwidth / 1e9,
        "bound_ms_per_token": 1000 * bound,
        "plain_ms_per_token": ms_per_token("plain"),
        "fraction_of_bound": 1000 * bound / ms_per_token("plain"),
        "before_lean_ms_per_token": ms_per_token("plain, transformers forward"),
        "before_lean_fraction_of_bound": 1000 * bound / ms_per_token("plain, transformers forward"),
        "hf_generate_ms_per_token": ms_per_token("hf generate"),
        "verify_ratio": curve.ratios if curve else None,  # measured at load (tuning.py)
        "verify_ratio_before_lean": curve_before.ratios if curve_before else None,
        "identical_to_generate": identical("hf generate"),
        "identical_to_before_lean": identical("plain, transformers forward"),
        # the compiled passes (specdec_core/compiled_pass.py), where built here; None where not
        "compiled_ms_per_token": ms_per_token("plain, compiled") if compiled else None,
        "compiled_fraction_of_bound": 1000 * bound / ms_per_token("plain, compiled") if compiled else None,
        "verify_ratio_compiled": paths.curves[COMPILED].ratios if compiled else None,
        "identical_compiled": identical("plain, compiled") if compiled else None,
        "profile": [op_profile(target.model, width) for width in (1, args.head_k + 1)],
    }
    print_bandwidth(report)
    return report


def print_bandwidth(report: dict) -> None:
    print(
        f"{report['machine']['kind']}: read bandwidth {report['bandwidth_gbs']:.1f} GB/s (median of "
        + " / ".join(f"{b:.1f}" for b in report["read_bandwidth_gbs"])
        + ": before, between the repeats, after)"
    )
    print(
        f"weights {report['weight_bytes'] / 1e6:.0f} MB: bound {report['bound_ms_per_token']:.1f} ms/token; "
        "plain decoding "
        f"{report['plain_ms_per_token']:.1f} ms/token = {100 * report['fraction_of_bound']:.0f}% of the bound; "
        f"identical to generate: {report['identical_to_generate']}"
    )
    print(
        "before the lean pass (packed kernels, transformers' forward): "
        f"{report['before_lean_ms_per_token']:.1f} ms/token = "
        f"{100 * report['before_lean_fraction_of_bound']:.0f}% of the bound; "
        f"identical: {report['identical_to_before_lean']}; "
        f"transformers' generate (stock): {report['hf_generate_ms_per_token']:.1f} ms/token"
    )
    if report["compiled_ms_per_token"] is not None:
        print(
            f"compiled passes: {report['compiled_ms_per_token']:.1f} ms/token = "
            f"{100 * report['compiled_fraction_of_bound']:.0f}% of the bound; identical: {report['identical_compiled']}"
        )
    for name, key in (
        ("lean pass", "verify_ratio"),
        ("compiled", "verify_ratio_compiled"),
        ("before", "verify_ratio_before_lean"),
    ):
        if report[key]:
            print(f"T(n)/T(1), n = 1.., {name}: " + " ".join(f"{r:.2f}" for r in report[key]))
    for run in report["profile"]:
        print(f"\n{run['width']}-token pass: {run['wall_ms']:.1f} ms wall")
        for op in run["ops"]:
            print(f"  {op['op']:52s} {op['ms']:6.2f} ms  {op['calls']:4d} calls")
        print(f"  {'other ops':52s} {run['other_ops_ms']:6.2f} ms")
        print(f"  {'outside ops (Python)':52s} {run['outside_ops_ms']:6.2f} ms")

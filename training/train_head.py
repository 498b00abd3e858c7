"""Trains the EAGLE draft head (specdec_core/drafters/eagle.py) for the embedded target, on the target's own answers.

    python -m training.train_head                 # data (cached), then training (resumes), then the head file
    python -m training.train_head --max-minutes 60   # stop after a checkpoint; run again to go on
    python -m training.train_head --smoke         # a tiny random target, a few steps (CI)
    python -m training.train_head --corpus data/draft-corpus --feature-layers 2,15,27 --out assets/eagle3-smollm2-135m
        # on the corpus of training/corpus.py (token ids; features made batch by batch), an EAGLE-3 head
    ... --corpus-tokens 500000                     # its first 500k response tokens: the learning curve by data size
    ... --corpus data/draft-corpus,data/draft-corpus-2   # two corpora, the first one's answers first
    ... --init assets/eagle-smollm2-135m --epochs 2 --out /tmp/h   # that head trained two epochs more (a new schedule)
    ... --depth-decay 0.8                          # depth s's loss weighted 0.8^(s-1), as EAGLE-3 (default: all alike)

Loss (EAGLE): smooth-L1 between the head's predicted feature and the target's real one, plus
cross-entropy against the target's next-token distribution, cut to its TARGET_TOP most likely tokens
(they carry nearly all the mass). Training-time test (EAGLE-3, HASS): the head is unrolled over `depth` of its own
steps; at depth s, entry j reads the head's own prediction from depth s-1 and attends to the real
entries up to j-s+1 and to its own earlier predictions, exactly the cache it sees when drafting
the s-th token. Tokens are the data's (the target's own), as if every earlier draft was accepted.

Feature layouts: EAGLE-1 reads the target's last layer and also regresses the next feature (smooth-L1);
a fused head (--feature-layers, EAGLE-3) reads a low, a middle and a high layer, and its loss is the
cross-entropy alone, as in EAGLE-3 (its outputs are its own hidden states, not the target's features).

Where torch sees a GPU the target, its features' forward and the head's steps run there (models.default_device);
the same command runs on a CPU, slower.

Everything is cached: the generated data under $SPECDEC_CACHE_DIR/draft-data, the checkpoint
under $SPECDEC_CACHE_DIR/draft-train. The learning curve (held-out top-1 agreement of each draft
position with the target's greedy choice, by training tokens seen; a continued head's after its init's) is written
beside the head as learning_curve.json.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import random
import time
from collections import Counter
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch
import torch.nn.functional as F
from tqdm import tqdm
from transformers import AutoTokenizer, PreTrainedModel

from specdec_core.drafters.eagle_head import CURVE_NAME, EagleHead, HeadConfig, load_head, save_head, training_runs
from specdec_core.machine import native_bfloat16
from specdec_core.models import default_device, load_stock
from specdec_core.prompts import stop_token_ids
from specdec_core.sources import EMBEDDED_ID, cache_dir
from training.corpus_answers import answers, made_features
from training.corpus_features import ids_only, with_layers
from training.draft_data import (
    TrainingSequence,
    generate_batch,
    generate_shards,
    length_batches,
    load_sequences,
    sample_prompts,
)
from training.feature_store import stored_features
from training.tiny_chat import tiny_target
from training.ttt_attention import unrolled_attention

HEAD_DIR = Path(__file__).resolve().parent.parent / "assets" / "eagle-smollm2-135m"
TARGET_TOP = 16
CHECKPOINT_MINUTES = 5  # between evaluations too: a run that is stopped loses at most this much


@dataclass(frozen=True, slots=True)
class Settings:
    prompts: int = 3000
    heldout_prompts: int = 96
    max_new_tokens: int = 128
    draft_vocab: int = 16384
    depth: int = 4  # training-time test through the draft length served by default (DraftConfig.k)
    epochs: int = 3
    batch_tokens: int = 2048
    lr: float = 1e-3
    feature_weight: float = 0.2  # EAGLE-1's regression of the target's next feature; a fused head has none
    feature_layers: str = ""  # the target layers a fused (EAGLE-3) head reads, "2,15,27"; "" = the last (EAGLE-1)
    corpus: str = ""  # folders of training/corpus.py, comma-separated, to train on instead of the templates' answers
    corpus_tokens: int = 0  # only the corpus's first N response tokens (0: all): the learning curve by data size
    precision: str = (
        "auto"  # "auto": bfloat16 autocast where the hardware multiplies bfloat16 (training_dtype); "float32"
    )
    seed: int = 0
    evals_per_epoch: int = 4
    depth_decay: float = 1.0  # depth s's loss weighs depth_decay ** (s - 1) (EAGLE-3: 0.8); 1.0: all depths alike
    draft_layers: int = 1  # the head's decoder layers; an --init head with fewer gains them (see deepened)


# ---- data ------------------------------------------------------------------------------------------

SCALE_SAMPLE = 256  # corpus sequences whose features set feature_scale


def training_data(
    settings: Settings, model: PreTrainedModel, tokenizer, work: Path
) -> tuple[list[TrainingSequence], list[TrainingSequence]]:
    return corpus_data(settings, model, work) if settings.corpus else embedded_data(settings, model, tokenizer)


def corpus_data(
    settings: Settings, model: PreTrainedModel, work: Path
) -> tuple[list[TrainingSequence], list[TrainingSequence]]:
    """The corpus's answers, split by conversation (corpus_answers.answers). The training ones' features are made
    once, at the step's precision
    (or copied from the rows the corpus kept as it wrote them), and read
    from disk (feature_store.py: three layers of 2M tokens and their prompts would not fit in memory); the
    held-out ones' by a float32 forward, in memory. The store holds every training sequence; the cap takes
    the first of them, in the shard order the corpus plan shuffled, so a smaller set samples every kind of
    prompt and the learning curve's runs share one store. Several corpora come one after the other, so a run
    capped at the first one's size trains on it alone (what the second one adds, measured)."""
    written, folders = [], [Path(folder) for folder in settings.corpus.split(",")]
    for folder in folders:
        found = answers(folder)
        if not found:
            raise SystemExit(f"{folder} holds no answers yet: run `python -m training.corpus --out {folder}` first.")
        written += found
    train_set, heldout_set = [], []
    for answer, sequence in zip(written, ids_only([a.record for a in written])):
        (heldout_set if answer.heldout else train_set).append(sequence)
    layers = layers_of(settings)
    totals = itertools.accumulate(s.response_length for s in train_set)
    kept = (
        len(train_set)
        if not settings.corpus_tokens
        else next((n for n, total in enumerate(totals, 1) if total >= settings.corpus_tokens), len(train_set))
    )
    dtype = training_dtype(settings, model.device)
    made = {}  # the last layer's rows a float32 target kept as it wrote the answers (where they were written)
    if not layers and dtype == torch.float32:
        for folder in folders:
            made.update(made_features(folder))
    stored = stored_features(model, train_set, layers, work / "corpus-features", dtype, count=kept, made=made)
    return stored, with_layers(model, heldout_set, layers)


def embedded_data(
    settings: Settings, model: PreTrainedModel, tokenizer
) -> tuple[list[TrainingSequence], list[TrainingSequence]]:
    """The training and held-out sequences, generated once and then read from the cache."""
    splits = {}
    for split, count in (("heldout", settings.heldout_prompts), ("train", settings.prompts)):
        name = f"{split}-n{count}-b48-s{settings.seed}-t{settings.max_new_tokens}"
        folder = cache_dir() / "draft-data" / name
        prompts = sample_prompts(split, count, seed=settings.seed)
        paths = generate_shards(
            model, tokenizer, prompts, folder, settings.max_new_tokens, batch_size=48, seed=settings.seed
        )
        splits[split] = load_sequences(paths)  # with the last layer's features
        if layers_of(settings):
            splits[split] = with_layers(model, splits[split], layers_of(settings))
    return splits["train"], splits["heldout"]


def draft_vocabulary(sequences: list[TrainingSequence], size: int, always: set[int]) -> torch.Tensor:
    """The `size` tokens the target emits most often in its responses (FR-Spec), end tokens included.

    A few thousand answers name fewer distinct tokens than the vocabulary needs (and never the
    held-out topics' words), so the remaining places go by token id: a BPE tokenizer numbers its
    merges in the order of their frequency in its own corpus, so low ids are the common ones."""
    counts = Counter(t for s in sequences for t in s.tokens[s.prompt_length :].tolist())
    by_count = [t for t, _ in sorted(counts.items(), key=lambda c: (-c[1], c[0]))]
    ranked = list(dict.fromkeys([*sorted(always), *by_count, *range(size + len(always) + len(by_count))]))
    return torch.tensor(sorted(ranked[:size]))


def coverage(sequences: list[TrainingSequence], ids: torch.Tensor) -> float:
    """Share of response tokens inside the draft vocabulary: the most a draft could ever propose."""
    kept = set(ids.tolist())
    tokens = [t for s in sequences for t in s.tokens[s.prompt_length :].tolist()]
    return sum(t in kept for t in tokens) / max(1, len(tokens))


def layers_of(settings: Settings) -> tuple[int, ...]:
    return tuple(int(i) for i in settings.feature_layers.split(",")) if settings.feature_layers else ()


def check_layout(target: PreTrainedModel, settings: Settings) -> None:
    """A feature layout or depth no head could be loaded with is refused before any data or training, not after."""
    config = HeadConfig.for_target(target, "", settings.draft_vocab, layers_of(settings), settings.draft_layers)
    config.check_target(target, f"--feature-layers {settings.feature_layers!r} --draft-layers {settings.draft_layers}")


def training_dtype(settings: Settings, device: torch.device) -> torch.dtype:
    """The dtype of the step's matrix products and of the stored training features: bfloat16 (torch.autocast;
    the weights, the optimizer, the softmaxes and the held-out measurement stay float32) on a GPU that has it
    or a CPU that multiplies it in hardware. On the AVX-512 BF16 EPYC it halves a 2,048-token step: the head's
    part 3.2 -> 1.7 s, the target's features 3.6 -> 1.8 s."""
    if settings.precision == "float32":
        return torch.float32
    if settings.precision != "auto":
        raise SystemExit(f"--precision is 'auto' or 'float32', not {settings.precision!r}")
    native = torch.cuda.is_bf16_supported() if device.type == "cuda" else native_bfloat16()
    return torch.bfloat16 if native else torch.float32


def feature_scale(sequences: list[TrainingSequence]) -> torch.Tensor:
    """Per-dimension RMS of the target's features: a few dimensions are in the thousands. Each sequence's last
    row is left out, as training leaves it (collate); features kept by the generation hold zeros there."""
    total = torch.zeros(sequences[0].features.shape[1], dtype=torch.float64)
    count = 0
    for s in sequences:
        total += s.features[:-1].double().pow(2).sum(0)
        count += len(s.features) - 1
    return (total / count).sqrt().clamp(min=1e-2).float()


def batches(sequences: list[TrainingSequence], batch_tokens: int, rng: random.Random) -> list[list[TrainingSequence]]:
    """Sequences of similar length together (less padding), batch order shuffled."""
    out = [[sequences[i] for i in batch] for batch in length_batches(sequences, batch_tokens)]
    rng.shuffle(out)
    return out


def collate(
    batch: list[TrainingSequence], device: torch.device
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """tokens [B, T], features [B, T, F] and the target's last hidden states [B, T, H] in float32, loss
    mask [B, T - 2] (entry j predicts token j + 2), on the head's device."""
    width = max(len(s.tokens) for s in batch)
    tokens = torch.stack([F.pad(s.tokens, (0, width - len(s.tokens))) for s in batch])

    def padded(rows: torch.Tensor) -> torch.Tensor:
        return F.pad(rows.float(), (0, 0, 0, width - len(rows)))

    features = torch.stack([padded(s.features) for s in batch])
    targets = features if all(s.last_layer is None for s in batch) else torch.stack([padded(s.targets) for s in batch])
    j = torch.arange(width - 2)[None]
    starts = torch.tensor([s.prompt_length for s in batch])[:, None]
    ends = torch.tensor([len(s.tokens) for s in batch])[:, None]
    mask = (j + 2 >= starts) & (j + 2 < ends)  # predictions of response tokens only: what is drafted
    return tokens.to(device), features.to(device), targets.to(device), mask.to(device)


# ---- the unrolled loss -----------------------------------------------------------------------------


def unrolled_pass(head: EagleHead, tokens: torch.Tensor, features: torch.Tensor, depth: int) -> list[torch.Tensor]:
    """The head's outputs [B, T - 2, H] at each depth 1..depth (training-time test). Depth s appends T entries
    to the head's cache; entry j sees the real (depth 1) entries 0..j-s+1 and, at each depth r = 2..s, the one
    entry j-s+r: the cache the head has when it drafts its s-th token after position j-s+1 (ttt_attention.py)."""
    batch, width = tokens.shape[0], tokens.shape[1] - 2
    tokens_in = tokens[:, 1 : width + 1]
    positions = torch.arange(width, device=tokens.device)[None].expand(batch, -1)
    cache = head.new_cache()
    outputs: list[torch.Tensor] = []
    feature_in = head.input_features(features[:, :width])
    with unrolled_attention(head.layer_config):
        for _ in range(depth):
            predicted = head(feature_in, tokens_in, positions, cache, None)
            outputs.append(predicted)
            # Depth s + 1 reads, at entry j, the output of entry j - 1 (the head's guess at position j).
            feature_in = torch.cat([torch.zeros_like(predicted[:, :1]), predicted[:, :-1]], dim=1)
    return outputs


def loss_terms(head: EagleHead, batch: list[TrainingSequence], settings: Settings) -> torch.Tensor:
    """The EAGLE loss at each depth, in a weighted mean (Settings.depth_decay). (No agreement here: an argmax
    over the draft vocabulary at every depth took 7% of a CPU step; heldout_agreement measures it at each
    evaluation.)"""
    tokens, features, targets, mask = collate(batch, head.device)
    width = tokens.shape[1] - 2
    real_next = targets[:, 1 : width + 1][mask]  # [M, H] the target's last hidden state where each entry predicts
    with torch.no_grad():
        # The target's distribution, cut to its TARGET_TOP most likely tokens: they carry nearly all
        # the mass, and the full [M, N] product would cost a quarter of the step on a CPU.
        # float32 softmaxes: CPU autocast would leave them in bfloat16.
        target_top, target_ids = (
            head.target_logits(real_next).float().softmax(-1).topk(TARGET_TOP, dim=-1)
        )  # [M, TARGET_TOP]
    total = torch.zeros((), device=tokens.device)
    weights = [settings.depth_decay**s for s in range(settings.depth)]
    for weight, predicted in zip(weights, unrolled_pass(head, tokens, features, settings.depth)):
        chosen = predicted[mask]  # [M, H]
        logits = head.logits(chosen)  # [M, N]
        loss = -(target_top * logits.float().log_softmax(-1).gather(1, target_ids)).sum(-1).mean()
        if head.fuse is None:  # EAGLE-1's output is a guess at the target's next (scaled) feature
            loss = loss + settings.feature_weight * F.smooth_l1_loss(chosen, real_next / head.feature_scale)
        total = total + weight * loss
    return total / sum(weights)


@torch.no_grad()
def heldout_agreement(head: EagleHead, sequences: list[TrainingSequence], settings: Settings) -> list[float]:
    """Top-1 agreement per draft position on held-out data, against the target's argmax over its
    *full* vocabulary (a token outside the draft vocabulary counts as a miss): the greedy
    acceptance rate of position s given that positions 1..s-1 were accepted."""
    hits = [0] * settings.depth
    count = 0
    for batch in batches(sequences, settings.batch_tokens, random.Random(0)):
        tokens, features, targets, mask = collate(batch, head.device)
        width = tokens.shape[1] - 2
        real_next = targets[:, 1 : width + 1][mask]
        target_ids = head.target_argmax(real_next)
        for s, predicted in enumerate(unrolled_pass(head, tokens, features, settings.depth)):
            chosen = head.draft_to_target[head.logits(predicted[mask]).argmax(-1)]
            hits[s] += int((chosen == target_ids).sum())
        count += int(mask.sum())
    return [h / max(1, count) for h in hits]


# ---- the loop --------------------------------------------------------------------------------------


def train(
    head: EagleHead,
    train_set: list[TrainingSequence],
    heldout_set: list[TrainingSequence],
    settings: Settings,
    checkpoint: Path,
    max_minutes: float | None = None,
) -> list[dict]:
    """Trains in place, resuming from `checkpoint`; returns the learning curve. Checkpoints at every evaluation
    and every CHECKPOINT_MINUTES between them; stops early (after a checkpoint) when max_minutes have passed,
    and the next call goes on from there. Every sequence has
    its features (the corpus's from feature_store.py); the step runs at training_dtype's precision."""
    trainable = [p for p in head.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=settings.lr, betas=(0.9, 0.95), weight_decay=0.0)
    steps_per_epoch = len(batches(train_set, settings.batch_tokens, random.Random(0)))
    total_steps = steps_per_epoch * settings.epochs
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: _lr_factor(step, total_steps))
    state = {"step": 0, "tokens": 0, "curve": []}
    if checkpoint.is_file():
        saved = torch.load(checkpoint, weights_only=False, map_location=head.device)
        if saved["settings"] == asdict(settings):
            head.load_state_dict(saved["head"])
            optimizer.load_state_dict(saved["optimizer"])
            schedule.load_state_dict(saved["schedule"])
            state = saved["state"]
    started = saved_at = time.perf_counter()
    eval_every = max(1, steps_per_epoch // settings.evals_per_epoch)
    progress = tqdm(total=total_steps, initial=state["step"], desc="training draft head", unit="step")
    recent: list[float] = []
    device = head.device
    dtype = training_dtype(settings, device)
    while state["step"] < total_steps:
        epoch, index = divmod(state["step"], steps_per_epoch)
        order = batches(train_set, settings.batch_tokens, random.Random(settings.seed * 1000 + epoch))
        with torch.autocast(device.type, dtype=dtype, enabled=dtype != torch.float32):
            batch = order[index]
            loss = loss_terms(head, batch, settings)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(trainable, 1.0)
        # A rare non-finite loss (seen about once in a few hundred CPU steps, not reproducible on
        # rerun of the same batch) would poison AdamW's moments for good: such a step is skipped.
        if torch.isfinite(loss) and torch.isfinite(grad_norm):
            optimizer.step()
            recent = (recent + [loss.item()])[-20:]
        else:
            state["skipped"] = state.get("skipped", 0) + 1
        schedule.step()
        state["step"] += 1
        state["tokens"] += sum(s.response_length for s in batch)
        progress.update(1)
        last_eval = state["curve"][-1]["heldout_top1"] if state["curve"] else None
        progress.set_postfix(
            loss=f"{sum(recent) / max(1, len(recent)):.3f}", heldout=_fmt(last_eval), skipped=state.get("skipped", 0)
        )
        done = state["step"] == total_steps
        evaluate = state["step"] % eval_every == 0 or done
        if evaluate:
            state["curve"].append(
                {
                    "step": state["step"],
                    "epoch": round(state["step"] / steps_per_epoch, 3),
                    "train_tokens": state["tokens"],
                    "train_loss": round(sum(recent) / max(1, len(recent)), 4),
                    "skipped_steps": state.get("skipped", 0),
                    "heldout_top1": [round(a, 4) for a in heldout_agreement(head, heldout_set, settings)],
                }
            )
        if evaluate or time.perf_counter() - saved_at > 60 * CHECKPOINT_MINUTES:
            _save_checkpoint(checkpoint, head, optimizer, schedule, state, settings)
            saved_at = time.perf_counter()
            if max_minutes is not None and saved_at - started > 60 * max_minutes and not done:
                break
    progress.close()
    return state["curve"]


def _lr_factor(step: int, total: int, warmup: int = 30) -> float:
    if step < warmup:
        return (step + 1) / warmup
    return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, (step - warmup) / max(1, total - warmup))))


def _fmt(values: list[float] | None) -> str:
    return "-" if not values else "/".join(f"{v:.2f}" for v in values)


def _save_checkpoint(path: Path, head, optimizer, schedule, state, settings) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {
        "head": head.state_dict(),
        "optimizer": optimizer.state_dict(),
        "schedule": schedule.state_dict(),
        "state": state,
        "settings": asdict(settings),
    }
    torch.save(payload, path.with_suffix(".tmp"))
    path.with_suffix(".tmp").rename(path)


# ---- entry points ----------------------------------------------------------------------------------


def new_head(
    target: PreTrainedModel, name: str, train_set: list[TrainingSequence], settings: Settings, stops: set[int]
) -> EagleHead:
    ids = draft_vocabulary(train_set, settings.draft_vocab, stops)
    head = EagleHead(
        target, HeadConfig.for_target(target, name, len(ids), layers_of(settings), settings.draft_layers), ids
    )
    sample = train_set[:SCALE_SAMPLE] if settings.corpus else train_set
    head.feature_scale.copy_(feature_scale(sample))
    target.requires_grad_(False)
    return head


def start_from(folder: Path, target: PreTrainedModel, settings: Settings) -> EagleHead:
    """A saved head to train further: a warm restart, with a new learning-rate schedule over the run's epochs
    (the held-out curve of the corpus-trained heads was still rising when their schedules ended). It keeps its
    own draft vocabulary and feature scale, so its layout and vocabulary size must be the run's; it may gain layers
    (--draft-layers, deepened)."""
    head = load_head(folder, target)
    want = (layers_of(settings), settings.draft_vocab)
    have = (head.config.feature_layers, head.config.draft_vocab_size)
    if have != want:
        raise SystemExit(
            f"--init {folder}: that head reads layers {list(have[0]) or 'last'} with {have[1]} draft tokens; "
            f"this run trains layers {list(want[0]) or 'last'} with {want[1]} (--feature-layers, --draft-vocab)."
        )
    if settings.draft_layers < head.config.draft_layers:
        raise SystemExit(
            f"--init {folder}: that head has {head.config.draft_layers} decoder layers; --draft-layers "
            f"{settings.draft_layers} would drop some (a head can gain layers, not lose them)."
        )
    target.requires_grad_(False)
    return deepened(head, target, settings.draft_layers).train()


def deepened(head: EagleHead, target: PreTrainedModel, draft_layers: int) -> EagleHead:
    """head with decoder layers added after its own, each starting as the identity: its attention output and MLP
    down projections are zero, so their residual branches add nothing (as LoRA starts its B at zero) and the
    deeper head drafts exactly as head did until training moves them; the other weights train from there."""
    if draft_layers == head.config.draft_layers:
        return head
    deeper = EagleHead(
        target, replace(head.config, draft_layers=draft_layers), head.draft_to_target, head.feature_scale.dtype
    )
    missing, unexpected = deeper.load_state_dict(head.state_dict(), strict=False)
    assert not unexpected and all(name.startswith("upper_layers.") for name in missing), (missing, unexpected)
    with torch.no_grad():
        for layer in deeper.upper_layers[head.config.draft_layers - 1 :]:
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
    return deeper


def run_embedded(settings: Settings, out: Path, max_minutes: float | None, init: Path | None = None) -> None:
    # Dense weights (load_stock): the packed kernels of a served model take float32 inputs only, and the
    # features' forward runs under bfloat16 autocast where the CPU multiplies bfloat16 (training_dtype).
    target = load_stock(EMBEDDED_ID, torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(target.name_or_path)
    train_and_save(
        settings, target, tokenizer, "SmolLM2-135M-Instruct (embedded Q4_1 GGUF)", out, max_minutes, init=init
    )


def train_and_save(
    settings: Settings,
    target: PreTrainedModel,
    tokenizer,
    name: str,
    out: Path,
    max_minutes: float | None,
    work: Path | None = None,
    init: Path | None = None,
) -> list[dict]:
    """The data, a new head (or `init`'s, start_from; or its checkpoint, resumed), training, then the head and its
    learning curve in `out` once every step is done. Returns the curve so far."""
    check_layout(target, settings)
    training_dtype(settings, target.device)  # a bad --precision fails before any data is made
    torch.manual_seed(settings.seed)
    work = work or cache_dir()  # the feature store and the checkpoints
    train_set, heldout_set = training_data(settings, target, tokenizer, work)
    stops = set(stop_token_ids(tokenizer, target))
    head = start_from(init, target, settings) if init else new_head(target, name, train_set, settings, stops)
    cover = {
        n: round(coverage(heldout_set, draft_vocabulary(train_set, n, stops)), 4)
        for n in (4096, 8192, 12288, 16384, 24576)
    }
    print(
        f"{len(train_set)} training sequences, {sum(s.response_length for s in train_set):,} response tokens; "
        f"held-out coverage of the draft vocabulary by size: {cover}"
    )
    run_name = (
        f"{out.name}-"
        + "-".join(f"{v}" for v in asdict(settings).values()).replace("/", "_")
        + (f"-from-{init.name}" if init else "")
    )
    checkpoint = work / "draft-train" / f"{run_name}.pt"
    curve = train(head, train_set, heldout_set, settings, checkpoint, max_minutes)
    if curve and curve[-1]["step"] == _total_steps(train_set, settings):
        save_head(head, out)
        earlier = _curve_file(init) if init else {}
        (out / CURVE_NAME).write_text(
            json.dumps(
                {
                    "settings": asdict(settings),
                    "init": str(init) if init else None,
                    "earlier_runs": training_runs(earlier),
                    "heldout_coverage": cover,
                    "curve": after_init(earlier.get("curve", []), curve),
                },
                indent=1,
            )
            + "\n"
        )
        load_head(out, target)  # what was saved must load
        print(f"saved {out}; held-out top-1 agreement per draft position: {_fmt(curve[-1]['heldout_top1'])}")
    else:
        print("stopped after a checkpoint; run the same command again to go on")
    return curve


def _curve_file(head: Path) -> dict:
    """A saved head's learning_curve.json, or {} for a head saved without one."""
    try:
        return json.loads((head / CURVE_NAME).read_text())
    except (OSError, ValueError):
        return {}


def after_init(earlier: list[dict], curve: list[dict]) -> list[dict]:
    """A continued head's curve after its init's own (`earlier`, from the init's learning_curve.json), its steps,
    epochs and tokens counted on from where the init's ended: the head's whole training in one curve, as the app
    draws it. Without an earlier curve (a head saved without one), this run's alone."""
    if not earlier:
        return curve
    end = earlier[-1]
    return earlier + [
        {
            **point,
            "step": point["step"] + end["step"],
            "epoch": round(point["epoch"] + end["epoch"], 3),
            "train_tokens": point["train_tokens"] + end["train_tokens"],
        }
        for point in curve
    ]


def _total_steps(train_set: list[TrainingSequence], settings: Settings) -> int:
    return len(batches(train_set, settings.batch_tokens, random.Random(0))) * settings.epochs


def run_smoke(out: Path, epochs: int = 6, feature_layers: str = "", draft_layers: int = 1) -> list[dict]:
    """A tiny random target's greedy continuations of random prompts; a few epochs; the head saved and reloaded."""
    settings = Settings(
        draft_vocab=128,
        depth=3,
        epochs=epochs,
        batch_tokens=512,
        lr=3e-3,
        evals_per_epoch=1,
        feature_layers=feature_layers,
        draft_layers=draft_layers,
    )
    target = tiny_target().to(default_device())  # on the GPU where there is one: the smoke run tests that path too
    check_layout(target, settings)
    rng = torch.Generator().manual_seed(1)
    prompts = [torch.randint(0, 256, (8,), generator=rng).tolist() for _ in range(40)]
    data = generate_batch(target, prompts, 0.0, [255], max_new_tokens=24)
    if layers_of(settings):
        data = with_layers(target, data, layers_of(settings))
    train_set, heldout_set = data[:32], data[32:]
    head = new_head(target, "tiny random Llama", train_set, settings, {255})
    curve = train(head, train_set, heldout_set, settings, out / "checkpoint.pt")
    save_head(head, out)
    load_head(out, target)
    (out / CURVE_NAME).write_text(json.dumps({"settings": asdict(settings), "curve": curve}, indent=1) + "\n")
    return curve


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    defaults = Settings()
    for name, value in asdict(defaults).items():
        parser.add_argument(f"--{name.replace('_', '-')}", type=type(value), default=value)
    parser.add_argument("--out", type=Path, default=HEAD_DIR)
    parser.add_argument("--max-minutes", type=float, default=None)
    parser.add_argument(
        "--init", type=Path, default=None, help="a saved head to train further (a new schedule over --epochs)"
    )
    parser.add_argument("--smoke", action="store_true", help="tiny random target, a few epochs (CI)")
    args = parser.parse_args(argv)
    torch.set_num_threads(max(1, torch.get_num_threads()))
    if args.smoke:
        curve = run_smoke(
            args.out if args.out != HEAD_DIR else cache_dir() / "draft-smoke",
            feature_layers=args.feature_layers,
            draft_layers=args.draft_layers,
        )
        print(f"smoke: loss {curve[0]['train_loss']} -> {curve[-1]['train_loss']}")
        return
    settings = Settings(**{name: getattr(args, name) for name in asdict(defaults)})
    run_embedded(settings, args.out, args.max_minutes, args.init)


if __name__ == "__main__":
    main()

"""The draft head's training corpus: prompts like the ones people send, built offline, and the
target's own answers to them, as token ids in resumable shards.

    python -m training.corpus --target-tokens 2000000
        # everything into data/draft-corpus/, resuming where it stopped
    nohup python -m training.corpus --target-tokens 2000000 > corpus.log 2>&1 &    # in the background
    python -m training.corpus --max-shards 20                # stop after 20 new shards (time boxing)
    python -m training.corpus --smoke --out /tmp/corpus      # a tiny random target, seconds (tests)
    python -m training.corpus --out data/draft-corpus-2 --seed 1 --after data/draft-corpus
        # a second corpus beside the first (more data: train_head --corpus A,B), repeating none of its prompts

Stages, each a job of shards under --out (training/shards.py), each starting when the one before is done:
  user-turns     the target writes user messages itself (training/self_prompts.py, Magpie)
  articles       it writes articles of 300-1,500 tokens: the passages of the summary, question and extraction tasks
  first-answers  it answers the first turn of the two-turn chats
  second-turns   it writes the second user turn of half of those chats; the others take a follow-up from the seeds
  responses      it answers every prompt of the final set, greedy or sampled, up to 256 tokens, until --target-tokens
The final set (prompts.jsonl.gz) mixes those prompts with the task families (training/task_families.py)
and draft_data's templated training prompts. Generated texts pass the quality filter and near-duplicate
removal; nothing overlapping an evaluation prompt is kept (training/eval_overlap.py). report.json
says how many of each kind were kept, what was dropped and why, and how varied the set is.
The prompt set is made once per --out; --target-tokens may grow on a rerun, and --batch-size only
shapes jobs not yet started. The device is CUDA when there is one (load_model's choice), so a GPU
runs the same command; on a CPU with native bfloat16 the target writes in bfloat16 (--dtype, generation_dtype),
so which dtype wrote a shard depends on the machine (job.json keeps the batch plan, not the dtype).
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import random
import sys
from collections import Counter
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from specdec_core import EMBEDDED_ID, load_model, stop_token_ids
from specdec_core.drafters.model_draft import reduced_copy
from specdec_core.machine import native_bfloat16
from specdec_core.models import load_stock
from specdec_core.sources import cache_dir
from training import diversity
from training.corpus_answers import ANSWER_JOBS, answers, keep_missing_features
from training.dedupe import distinct
from training.draft_data import TEMPERATURES, sample_prompts
from training.eval_overlap import OverlapFilter
from training.generation import encode_chat, free_cores
from training.quality import PARAGRAPH, TextLimits, clean_prefix, defect
from training.self_prompts import TEMPERATURE, TOP_P, UserTurnRequest, first_turn_requests, pre_query, user_text
from training.shards import Job, Record, Request, ShardBudget, Stopped, run
from training.task_families import article_requests, load_seeds, passage_prompts, template_prompts
from training.text_ngrams import words
from training.tiny_chat import tiny_chat_model, tiny_chat_tokenizer

# In the repository, not the cache: token ids only (~2 bytes a token, ~4 MB for 2M tokens), committed as
# the shards land, so that generation goes on across runs and machines where it stopped.
CORPUS_DIR = Path(__file__).resolve().parent.parent / "data" / "draft-corpus"
ARTICLE_TEMPERATURE = 0.8  # coherent articles; greedy decoding loops on long text


@dataclass(frozen=True, slots=True)
class Recipe:
    prompts: int = 12_000  # planned size of the final prompt set; the filters keep most of it
    target_tokens: int = 2_000_000  # response tokens
    # The fastest measured on 2 CPU cores (training/throughput.py, 2 threads): in bfloat16 332 response tokens/s
    # at 96, 233 at 48, 294 at 192; in float32 48 was. Stored in each job's plan when it starts; more on a GPU.
    batch_size: int = 96
    response_tokens: int = 256
    user_turn_tokens: int = 128
    passage_min_tokens: int = 300
    passage_max_tokens: int = 1500
    # Shares of the final set by source; draft_data's templated prompts make up the rest.
    magpie_share: float = 0.35
    chat_share: float = 0.12
    family_share: float = 0.25
    passage_share: float = 0.08
    oversample: float = 1.6  # user turns and articles generated per one needed: the filters drop some
    quorum: float = 0.8  # a batch of user turns or articles stops when this share has ended (generation.Sampling)
    seed: int = 0

    @staticmethod
    def smoke() -> Recipe:
        return Recipe(
            prompts=60,
            target_tokens=100,
            batch_size=8,
            response_tokens=16,
            user_turn_tokens=16,
            passage_min_tokens=2,
            passage_max_tokens=40,
            oversample=3.0,
        )

    def count(self, share: float) -> int:
        return round(share * self.prompts)


@dataclass(frozen=True, slots=True)
class Target:
    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    stops: list[int]


@dataclass(frozen=True, slots=True)
class CorpusPrompt:
    source: str  # "magpie", "two_turn", "family", "passage" or "templated"
    family: str
    turns: tuple[str, ...]  # user, assistant, user, ...: the target answers the last one
    temperature: float

    def messages(self) -> list[dict[str, str]]:
        return [{"role": ("user", "assistant")[i % 2], "content": text} for i, text in enumerate(self.turns)]


@dataclass(frozen=True, slots=True)
class Build:
    """What one build needs at every stage, and what it has dropped so far."""

    target: Target
    recipe: Recipe
    out: Path
    budget: ShardBudget
    seeds: dict
    overlap: OverlapFilter
    dropped: dict[str, Counter]
    after: tuple[Path, ...] = ()  # corpora this one adds to (--after): none of their prompts is repeated

    def job(
        self,
        name: str,
        top_p: float,
        max_new_tokens: int,
        quorum: float = 1.0,
        target_tokens: int | None = None,
        stop_loops: bool = False,
    ) -> Job:
        # The answers, which the head trains on (corpus_answers), keep their features where the target writes in
        # float32, as the feature store computes them; a bfloat16 target's differ from the store's bfloat16
        # autocast, which keeps the residual stream in float32.
        keep_features = name in ANSWER_JOBS and self.target.model.dtype == torch.float32
        return Job(
            name,
            self.out / name,
            top_p,
            max_new_tokens,
            self.recipe.batch_size,
            quorum,
            self.recipe.seed,
            target_tokens,
            stop_loops,
            keep_features=keep_features,
        )

    def rng(self, stage: str) -> random.Random:
        return random.Random(f"{self.recipe.seed}-{stage}")

    def screen(self, stage: str, texts: list[str], limits: TextLimits, rejected: list[str | None]) -> list[int]:
        """Indices of the usable texts: not rejected already (unfinished, say), no defect, no
        evaluation overlap, no near-duplicate of an earlier one."""
        reasons = self.dropped.setdefault(stage, Counter())
        usable = []
        for i, text in enumerate(texts):
            reason = rejected[i] or defect(text, limits) or _overlap_reason(self.overlap.overlap(text))
            if reason:
                reasons[reason] += 1
            else:
                usable.append(i)
        kept = [usable[j] for j in distinct([texts[i] for i in usable])]
        reasons["near-duplicate"] += len(usable) - len(kept)
        return kept


def _overlap_reason(name: str | None) -> str | None:
    return f"overlaps {name}" if name else None


# ---- stages ----------------------------------------------------------------------------------------


def user_turns(build: Build) -> list[tuple[str, str]]:
    """(family, message) written by the target, as many as the single-turn and two-turn prompts need."""
    recipe, tokenizer = build.recipe, build.target.tokenizer
    wanted = recipe.count(recipe.magpie_share) + recipe.count(recipe.chat_share)
    requests = first_turn_requests(build.seeds, math.ceil(wanted * recipe.oversample), build.rng("user-turns"))
    records = _generate(
        build,
        "user-turns",
        [Request(tuple(pre_query(tokenizer, r)), r.family, TEMPERATURE) for r in requests],
        TOP_P,
        recipe.user_turn_tokens,
        recipe.quorum,
        stop_loops=True,
    )
    texts = [user_text(tokenizer, request, record.response) for request, record in zip(requests, records)]
    kept = build.screen(
        "user-turns", texts, TextLimits(), [_unfinished(r) or _opening_only(tokenizer, r) for r in records]
    )
    return [(requests[i].family, texts[i]) for i in kept][:wanted]


def passages(build: Build) -> list[tuple[str, str]]:
    """(topic, article) written by the target, between the recipe's token bounds: each article's whole
    paragraphs up to its first defect (quality.clean_prefix), whether or not the target ended it."""
    recipe, tokenizer = build.recipe, build.target.tokenizer
    wanted = math.ceil(recipe.count(recipe.passage_share) / 2)  # two prompts per passage
    requests = article_requests(build.seeds, math.ceil(wanted * recipe.oversample), build.rng("articles"))
    encoded = [
        Request(tuple(encode_chat(tokenizer, [{"role": "user", "content": r.text}])), "article", ARTICLE_TEMPERATURE)
        for r in requests
    ]
    records = _generate(
        build, "articles", encoded, TOP_P, recipe.passage_max_tokens + 1, recipe.quorum, stop_loops=True
    )
    # The token bounds decide the length; the word limits only keep the quality checks from objecting.
    limits = TextLimits(min_words=1, max_words=2 * recipe.passage_max_tokens)
    whole = [_whole_paragraphs(tokenizer.decode(r.response, skip_special_tokens=True), r.finished) for r in records]
    texts = [clean_prefix(text, limits) for text in whole]
    bounds = range(recipe.passage_min_tokens, recipe.passage_max_tokens + 1)
    rejected = [
        _passage_rejected(w, t, limits, len(tokenizer(t, add_special_tokens=False)["input_ids"]) in bounds)
        for w, t in zip(whole, texts)
    ]
    kept = build.screen("articles", texts, limits, rejected)
    return [(requests[i].topic, texts[i]) for i in kept][:wanted]


def two_turn_chats(build: Build, firsts: list[tuple[str, str]]) -> list[CorpusPrompt]:
    """[user, the target's answer, a second user turn]: written by the target for even chats, a seed follow-up for odd
    ones."""
    recipe, tokenizer = build.recipe, build.target.tokenizer
    temperatures = [TEMPERATURES[i % len(TEMPERATURES)] for i in range(len(firsts))]
    asked = [
        Request(tuple(encode_chat(tokenizer, [{"role": "user", "content": text}])), family, t)
        for (family, text), t in zip(firsts, temperatures)
    ]
    answers = [_answer(build, r) for r in _generate(build, "first-answers", asked, 1.0, recipe.response_tokens)]
    # An empty or looping first answer makes a conversation nobody would continue.
    reasons = build.dropped.setdefault("first-answers", Counter())
    limits = TextLimits(min_words=1, max_words=10 * recipe.response_tokens)
    chats = []
    for (family, first), answer in zip(firsts, answers):
        reason = defect(answer, limits)
        if reason:
            reasons[reason] += 1
        else:
            chats.append((family, first, answer))
    writer = UserTurnRequest("chat", None, "")
    written = [
        Request(tuple(pre_query(tokenizer, writer, _chat_messages(c[1], c[2]))), c[0], TEMPERATURE) for c in chats[::2]
    ]
    records = _generate(build, "second-turns", written, TOP_P, recipe.user_turn_tokens, recipe.quorum, stop_loops=True)
    seconds = [user_text(tokenizer, writer, r.response) for r in records]
    usable = set(build.screen("second-turns", seconds, TextLimits(), [_unfinished(r) for r in records]))
    rng = build.rng("follow-ups")
    prompts = []
    for i, (family, first, answer) in enumerate(chats):
        own = seconds[i // 2] if i % 2 == 0 and i // 2 in usable else None
        second = own or rng.choice(build.seeds["follow_ups"])  # a dropped own turn falls back to a follow-up
        prompts.append(CorpusPrompt("two_turn", family, (first, answer, second), 0.0))
    return prompts


def _chat_messages(first: str, answer: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": first}, {"role": "assistant", "content": answer}]


def _generate(
    build: Build,
    name: str,
    requests: list[Request],
    top_p: float,
    max_new_tokens: int,
    quorum: float = 1.0,
    stop_loops: bool = False,
) -> list[Record]:
    """Stages that write prompts and passages stop looping rows (their filters cut loops anyway); answers never do."""
    job = build.job(name, top_p, max_new_tokens, quorum, stop_loops=stop_loops)
    return run(build.target.model, requests, job, build.target.stops, build.budget)


def _unfinished(record: Record) -> str | None:
    """A turn the target never ended (cut at max_new_tokens) is not a whole message."""
    return None if record.finished else "unfinished"


def _opening_only(tokenizer: PreTrainedTokenizerBase, record: Record) -> str | None:
    """The target ended the turn right after the opening words: no request in it."""
    return None if len(words(tokenizer.decode(record.response, skip_special_tokens=True))) >= 2 else "opening only"


def _whole_paragraphs(text: str, finished: bool) -> str:
    """The text without its last paragraph when it was cut short (a loop or the batch's quorum): that one may end
    mid-sentence."""
    return (text if finished else text.rpartition(PARAGRAPH)[0]).strip()


def _passage_rejected(whole: str, passage: str, limits: TextLimits, long_enough: bool) -> str | None:
    if not whole:
        return "cut short in its first paragraph"
    if not passage:
        return f"first paragraph: {defect(whole.partition(PARAGRAPH)[0], limits)}"
    return None if long_enough else "length"


def _answer(build: Build, record: Record) -> str:
    return build.target.tokenizer.decode(record.response, skip_special_tokens=True).strip()


# ---- the prompt set --------------------------------------------------------------------------------


def assemble(
    build: Build, singles: list[tuple[str, str]], chats: list[CorpusPrompt], articles: list[tuple[str, str]]
) -> list[CorpusPrompt]:
    """Every source together, exact repeats and evaluation overlaps dropped, shuffled, temperatures assigned."""
    recipe, seeds = build.recipe, build.seeds
    others = recipe.magpie_share + recipe.chat_share + recipe.family_share + recipe.passage_share
    templated = sample_prompts("train", recipe.count(1 - others), seed=recipe.seed)
    candidates = [
        *(CorpusPrompt("magpie", family, (text,), 0.0) for family, text in singles),
        *chats,
        *(
            CorpusPrompt("family", p.family, (p.text,), 0.0)
            for p in template_prompts(seeds, recipe.count(recipe.family_share), build.rng("families"))
        ),
        *(
            CorpusPrompt("passage", p.family, (p.text,), 0.0)
            for p in passage_prompts(articles, seeds, build.rng("passages"))
        ),
        *(CorpusPrompt("templated", p.kind, (p.text,), 0.0) for p in templated),
    ]
    reasons = build.dropped.setdefault("prompt set", Counter())
    earlier = {prompt_key(p) for folder in build.after for p in read_prompt_set(folder)}
    seen: set[str] = set()
    kept = []
    for prompt in candidates:
        key = prompt_key(prompt)
        overlap = next(filter(None, (build.overlap.overlap(t) for t in prompt.turns[::2])), None)
        if overlap or key in seen or key in earlier:
            reasons[f"overlaps {overlap}" if overlap else "repeat" if key in seen else "in an earlier corpus"] += 1
            continue
        seen.add(key)
        kept.append(prompt)
    build.rng("order").shuffle(kept)
    return [replace(p, temperature=TEMPERATURES[i % len(TEMPERATURES)]) for i, p in enumerate(kept)]


def prompt_key(prompt: CorpusPrompt) -> str:
    """What makes two prompts the same one: their user turns, case and outer spaces aside."""
    return "\n".join(prompt.turns[::2]).strip().lower()


def write_prompt_set(build: Build, prompts: list[CorpusPrompt], singles: list[tuple[str, str]]) -> None:
    path = build.out / "prompts.jsonl.gz"
    with gzip.open(path.with_name(path.name + ".tmp"), "wt", encoding="utf-8") as f:
        for p in prompts:
            f.write(json.dumps(asdict(p), ensure_ascii=False) + "\n")
    path.with_name(path.name + ".tmp").replace(path)
    report = {
        "recipe": asdict(build.recipe),
        "after": [str(folder) for folder in build.after],
        "sources": dict(Counter(p.source for p in prompts)),
        "families": dict(Counter(f"{p.source}/{p.family}" for p in prompts).most_common()),
        "temperatures": {str(t): n for t, n in sorted(Counter(p.temperature for p in prompts).items())},
        "dropped": {stage: dict(c.most_common()) for stage, c in build.dropped.items()},
        "diversity": {
            "magpie user turns": diversity.report([text for _, text in singles]),
            "all prompts (last user turn)": diversity.report([p.turns[-1] for p in prompts]),
        },
    }
    (build.out / "report.json").write_text(json.dumps(report, indent=1, ensure_ascii=False) + "\n")


def read_prompt_set(folder: Path) -> list[CorpusPrompt]:
    with gzip.open(folder / "prompts.jsonl.gz", "rt", encoding="utf-8") as f:
        return [CorpusPrompt(d["source"], d["family"], tuple(d["turns"]), d["temperature"]) for d in map(json.loads, f)]


# ---- the whole build -------------------------------------------------------------------------------


def build_corpus(
    target: Target, recipe: Recipe, out: Path, max_shards: int | None = None, after: tuple[Path, ...] = ()
) -> list[Record]:
    """The prompt set (made once), then the target's responses up to the token target. Raises
    shards.Stopped when max_shards new shards are written; the next call goes on from there."""
    out.mkdir(parents=True, exist_ok=True)
    build = Build(target, recipe, out, ShardBudget(max_shards), load_seeds(), OverlapFilter(), {}, after)
    if not (out / "prompts.jsonl.gz").is_file():
        turns = user_turns(build)
        chats = recipe.count(recipe.chat_share)
        articles = passages(build)
        prompts = assemble(build, turns[chats:], two_turn_chats(build, turns[:chats]), articles)
        write_prompt_set(build, prompts, turns[chats:])
    prompts = read_prompt_set(out)
    requests = [
        Request(tuple(encode_chat(target.tokenizer, p.messages())), f"{p.source}/{p.family}", p.temperature)
        for p in prompts
    ]
    job = build.job("responses", 1.0, recipe.response_tokens, target_tokens=recipe.target_tokens)
    return run(target.model, requests, job, target.stops, build.budget)


def embedded_target(dtype: str = "auto") -> Target:
    """The embedded target, writing in generation_dtype(dtype)."""
    loaded = load_model(EMBEDDED_ID, for_generate=True)
    stops = sorted(stop_token_ids(loaded.tokenizer, loaded.model))
    wanted = generation_dtype(dtype, loaded.model)
    if wanted == loaded.model.dtype:
        return Target(loaded.model, loaded.tokenizer, stops)
    return Target(reduced_copy(EMBEDDED_ID, wanted, for_generate=True), loaded.tokenizer, stops)


def generation_dtype(choice: str, model: PreTrainedModel) -> torch.dtype:
    """ "float32", "bfloat16", or "auto": bfloat16 where the CPU multiplies it in hardware (machine.native_bfloat16:
    2.4x the tokens/s of float32 at batch 48 on the 2-core AMD EPYC with AVX-512 BF16, 280 against 118), the
    model's own dtype elsewhere (float32 on a CPU, CUDA's default on a GPU). The text stays the target's own:
    the float32 target's argmax agreed with 98% of the bfloat16 copy's greedy tokens (32 prompts, 2,792
    positions)."""
    if choice != "auto":
        return {"float32": torch.float32, "bfloat16": torch.bfloat16}[choice]
    if model.device.type == "cpu" and native_bfloat16():
        return torch.bfloat16
    return model.dtype


def smoke_target() -> Target:
    tokenizer = tiny_chat_tokenizer()
    return Target(tiny_chat_model(tokenizer), tokenizer, [tokenizer.eos_token_id])


def main(argv: list[str] | None = None) -> list[Record] | None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    for f in fields(Recipe):
        parser.add_argument(f"--{f.name.replace('_', '-')}", type=type(f.default), default=None)
    parser.add_argument(
        "--out", type=Path, default=None, help=f"default: {CORPUS_DIR.relative_to(CORPUS_DIR.parents[1])}"
    )
    parser.add_argument("--max-shards", type=int, default=None, help="stop after writing this many new shards")
    parser.add_argument(
        "--threads", type=int, default=None, help="CPU threads (default: the cores other work leaves free)"
    )
    parser.add_argument(
        "--dtype",
        choices=["auto", "float32", "bfloat16"],
        default="auto",
        help="the target's dtype while it writes (auto: bfloat16 where this CPU multiplies it in hardware)",
    )
    parser.add_argument(
        "--after",
        type=Path,
        nargs="*",
        default=(),
        help="corpora this one adds to (give it another --seed): it repeats none of their prompts",
    )
    parser.add_argument(
        "--keep-features",
        action="store_true",
        help="write nothing new: make the float32 features of the answer shards that kept none (for training)",
    )
    parser.add_argument("--smoke", action="store_true", help="tiny random target and a tiny recipe (tests)")
    args = parser.parse_args(argv)
    base = Recipe.smoke() if args.smoke else Recipe()
    recipe = replace(
        base, **{f.name: getattr(args, f.name) for f in fields(Recipe) if getattr(args, f.name) is not None}
    )
    out = args.out or (cache_dir() / "draft-corpus-smoke" if args.smoke else CORPUS_DIR)
    for folder in args.after:
        if folder.resolve() == out.resolve() or not (folder / "prompts.jsonl.gz").is_file():
            parser.error(
                f"--after {folder}: not an earlier corpus with a prompt set (prompts.jsonl.gz) beside --out {out}"
            )
    if args.keep_features:
        model = smoke_target().model if args.smoke else load_stock(EMBEDDED_ID, torch.float32)
        print(f"{out}: features made for {keep_missing_features(out, model)} shards", file=sys.stderr)
        return None
    target = smoke_target() if args.smoke else embedded_target(args.dtype)
    # A tiny model gains nothing from a second thread; a real one gets the cores nothing else is using.
    previous = torch.get_num_threads()
    torch.set_num_threads(args.threads or (1 if args.smoke else free_cores()))
    try:
        records = build_corpus(target, recipe, out, args.max_shards, tuple(args.after))
    except Stopped as stop:
        print(f"{stop}; run the same command again to go on", file=sys.stderr)
        return None
    finally:
        torch.set_num_threads(previous)
    tokens = sum(len(r.response) for r in records)
    written = answers(out)  # what the head learns from: the first answers too
    size = sum(p.stat().st_size for p in (out / "responses").glob("shard-*.npz"))
    print(
        f"{out}: {len(records):,} responses, {tokens:,} response tokens, {size / 1e6:.1f} MB of response shards; "
        f"with the first answers {sum(len(a.record.response) for a in written):,} answer tokens "
        "(training and held out)",
        file=sys.stderr,
    )
    if tokens < recipe.target_tokens:
        print(
            "every prompt is answered short of --target-tokens: a larger --prompts needs a new --out", file=sys.stderr
        )
    return records


if __name__ == "__main__":
    main()

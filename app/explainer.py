"""The explainer's text. Formulas in LaTeX, rendered by Gradio's Markdown."""

import json
from collections import Counter
from collections.abc import Sequence

from specdec_core import expected_speedup
from specdec_core.drafters import DRAFT_EAGLE
from specdec_core.drafters.eagle_head import AGREEMENT_NAME, CURVE_NAME, training_runs
from specdec_core.drafters.head_variants import DRAFT_EAGLE_PREFIX, HEADS_DIR
from specdec_core.drafters.hybrid import HybridDrafter

from .explainer_point import Fit, RacePoint

WHAT_IT_IS = r"""
### 1. What speculative decoding is

A large model generates one token per forward pass, and on most hardware that pass costs about the
same whether it scores one token or five: the time goes into reading the weights, not into the arithmetic.
Speculative decoding exploits that. A cheap **draft** guesses the next $k$ tokens $x_1 \dots x_k$; the
**target** scores all of them in **one** pass and keeps the longest prefix it agrees with, plus one token of its own.
"""

WHY_EXACT = (
    r"""
### 2. Why the output is exactly the target's

**The acceptance rule** (Leviathan et al. 2022; Chen et al. 2023). With $p_i$ the target's and $q_i$ the draft's
distribution at position $i$ (after the same temperature, top-k and top-p):

$$\text{accept } x_i \text{ with probability } \min\left(1, \frac{p_i(x_i)}{q_i(x_i)}\right)$$

At the first rejection the replacement is drawn from the residual

$$x_i' \sim \operatorname{norm}\big(\max(0,\ p_i - q_i)\big)$$

and if all $k$ are accepted a **bonus** token is drawn from $p_{k+1}$. Greedy decoding is the limit: accept while
$\arg\max p_i = x_i$; the first mismatch is replaced by $\arg\max p_i$.

**Why nothing is lost.** A token $x$ comes out either as an accepted draft,
with probability $q(x)\min(1, p(x)/q(x)) = \min(q(x), p(x))$, or through a rejection followed by the residual,
with probability $\big(1 - \sum_y \min(p(y), q(y))\big)\cdot """
    r"""\frac{\max(0, p(x) - q(x))}{\sum_y \max(0, p(y)-q(y))} = p(x) - \min(p(x), q(x))$.
The two add up to $p(x)$: no quality is lost, whatever the draft. The draft only decides the speed.
"""
)

WHEN_IT_PAYS = r"""
### 3. When it pays

With acceptance rate $a$ (the chance that a drafted position is accepted), each target pass yields on average

$$E[\text{tokens per pass}] = \frac{1 - a^{k+1}}{1 - a}$$

and if one draft step costs $c$ target steps, the expected speedup over plain decoding is

$$S(a, c, k) = \frac{1 - a^{k+1}}{(1 - a)(k\,c + 1)}$$

A longer draft helps only while $a$ is high and $c$ low. Predictable text (JSON, code edits, copying from the prompt)
has high $a$; creative text sampled at temperature 1 has low $a$, and speculation can then be slower than plain
decoding. The formula assumes verifying $k$ tokens costs one ordinary pass. On a GPU that is nearly true; on a CPU a
pass over $k+1$ tokens costs more, by a factor $T(k+1)/T(1)$ that this app measures on the machine it runs on
(section 4), so

$$S(a, c, k) = \frac{E[\text{tokens per pass}]}{T(k+1)/T(1) + k\,c}$$

The chart shows both: the ideal, and the same $a$, $c$, $k$ with this machine's measured cost curve; the star is
your last race, placed by what it measured.
"""

DEFINITIONS = """
- **Acceptance per drafted node** (the race's summary) is accepted drafts ÷ drafted nodes, every node of a tree and \
of a lookup chain counted, so it is not the formula's $a$.
- **Accepted tokens per target pass** is tokens emitted ÷ target passes: the accepted drafts plus the target's own \
token, over every pass of the speculative side.
- **Speculative steps and target passes**: a speculative step drafts and verifies in one target pass; the other \
passes (the prompt's, and those where adaptive $k$ chose $k$ = 0 or the drafter had nothing to offer) are plain steps \
of one token each, so target passes = speculative steps + plain steps.
- **The star** sits at the race's mean draft depth over its target passes, rounded (a plain step counts 0; the UI's \
$k$ limits only the head's depth, the hybrid's lookup chains run longer), at its measured speedup = accepted tokens \
per target pass × the plain side's seconds per token ÷ the mean seconds per target pass.
- **Its dashed curve** has for $c$ what a pass cost beyond the verification at that depth, per drafted position, in \
plain passes, and for $a$ the acceptance per position that gives the measured tokens per target pass at that depth; \
*Use my last race's a, c and k* puts them on the sliders.
"""

NO_RACE_YET = "*Run a race on the Race tab: its point and its curve appear on the chart.*"


def race_point_text(point: RacePoint, fitted: Fit, node_acceptance: float, ui_k: int) -> str:
    """The last race's measurements behind its star, with the definitions above, and the a, c, k fitted to them."""
    plain_steps = point.target_passes - point.speculative_steps
    cheap = (
        " Its passes cost less than this machine's verification curve says at that depth (the curve was timed at "
        "load, on a CPU shared with others), so $c$ is 0 and $a$ is raised until the curve meets the star."
        if fitted.cheap_passes
        else ""
    )
    return (
        f"**Your last race** (UI $k$ = {ui_k}): {point.target_passes} target passes = {point.speculative_steps} "
        f"speculative steps + {plain_steps} plain step{'s' * (plain_steps != 1)}; "
        f"acceptance per drafted node {node_acceptance:.0%}; "
        f"{point.tokens_per_pass:.2f} accepted tokens per target pass at a mean draft depth of {point.depth:.1f}; "
        f"the mean target pass took {point.pass_cost:.2f}× the plain side's time per token, so "
        f"{point.tokens_per_pass:.2f} ÷ {point.pass_cost:.2f} = {point.speedup:.2f}×. Its curve: "
        f"$a$ = {fitted.a:.3f}, $c$ = {fitted.c:.3f}, $k$ = {fitted.k}.{cheap}"
    )


MACHINE_INTRO = """### 4. This machine's costs
Every cost here is measured on the machine the app runs on, when a model first loads (a few seconds, then cached
per CPU model, instruction set, thread count and library versions): which matrix kernels are fastest, what a
target pass over $n$ tokens costs against one token, and one draft pass of each drafter ($c$). The curve is measured
behind a short context and a long one: a pass's attention reads every cached token for each new one, so behind a long
prompt (a passage to summarize) a wide pass costs more, and adaptive $k$, trees and the hybrid read the curve at each
step's context length. Numbers from another machine would be wrong here: CPUs with AVX-512 BF16 run bfloat16
through oneDNN, AVX2-only CPUs cannot, and wider passes cost more on some CPUs than on others."""

STEP_INTRO = """### 5. Your last race, step by step
Replays the speculative steps of your last race: what the draft proposed, the target's probability for each token,
the probability with which the rule accepted it, and which token the target added. Target passes without a draft
(plain steps) are not replayed; the slider says how many there were."""

HEADLINES = f"""
**Published numbers.** Leviathan et al.: 2-3× on T5-XXL with identical outputs. Chen et al.: 2-2.5× on Chinchilla 70B.
Spec-Bench (Vicuna-7B, greedy): draft-model speculative sampling 1.79×, prompt lookup 1.64× on average, 2.3-2.7× on
summarization and about 1.0× on translation: the workload decides. For scale: at a = 0.8, c = 0.05, k = 4 the formula
gives {expected_speedup(0.8, 4, 0.05):.2f}×.
"""


def head_intro(curve: list[dict], agreement: dict[str, list[float]], recipe: Sequence[dict] = ()) -> str:
    """The head's story: its training read from its learning curve (the answer tokens and epochs it saw) and its
    recipe (the corpus each run read), its agreement from the realistic set's measurement saved beside it
    (agreement.json)."""
    end = curve[-1]
    corpora = _epochs_by_corpus(recipe)
    seen = f"{end['train_tokens'] / 1e6:.2f}M answer tokens seen over {end['epoch']:g} epochs" + (
        f" ({corpora})" if corpora else ""
    )
    return f"""### The embedded model's draft: an EAGLE head trained here
No small model of SmolLM2-135M's family exists, so its draft is a learned **draft head** (EAGLE, Li et al.
2024): one decoder layer of the target's own architecture that reads the target's last hidden state and the next
token, predicts the next hidden state, and scores it with the target's own frozen lm_head cut to its 16,384 most
frequent tokens. Its cost per pass, measured on this machine, is listed under *This machine's costs*. It was trained \
on the target's own answers to prompts the target wrote itself
({seen}; the corpora hold user turns, chats, task families and passages;
`python -m training.train_head --corpus`); the curve shows how often its guess equals the target's greedy choice,
per draft position, on **held-out conversations it never saw**. The default drafter puts the head's tree and n-gram
lookup in one tree: {_agreement_sentence(agreement)} While the answer
copies a span, the lookup drafts alone and longer (up to {HybridDrafter.LONGEST_LOOKUP} tokens), and each guess \
is as long as what guesses
after matches of its length (the last 3, 2 or 1 tokens found earlier) kept in this run pays for; \
where the head's passes earn less than
they cost, it rests and is tried again every {HybridDrafter.PROBE_EVERY} steps."""


def _epochs_by_corpus(recipe: Sequence[dict]) -> str:
    """Like "4 over `data/draft-corpus`, 1 over `data/draft-corpus-2`": the epochs each corpus was read, over the
    runs."""
    epochs = Counter()
    for run in recipe:
        if run.get("corpus"):
            epochs[run["corpus"]] += run["epochs"]
    return ", ".join(f"{count:g} over `{corpus}`" for corpus, count in epochs.items())


def _agreement_sentence(agreement: dict[str, list[float]]) -> str:
    """What the realistic set's first-position agreement says, or what the lookup adds when it was not measured."""
    copies = "lookup adds the copies (names, code, passages) the head misses."
    by_category = {c: v[0] for c, v in agreement.items() if c != "all"}
    if not by_category:
        return f"n-gram {copies}"
    weakest, strongest = min(by_category, key=by_category.get), max(by_category, key=by_category.get)
    return (
        f"on prompts no one here trained on, the head alone guesses the first token right "
        f"{by_category[weakest]:.0%} ({weakest.replace('_', ' ')}) to {by_category[strongest]:.0%} "
        f"({strongest.replace('_', ' ')}) of the time by category ({agreement['all'][0]:.2f} over all), and {copies}"
    )


def _shipped_head_file(name: str) -> dict:
    path = HEADS_DIR / DRAFT_EAGLE.removeprefix(DRAFT_EAGLE_PREFIX) / name
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def head_training() -> tuple[list[dict], list[dict]]:
    """The shipped head's learning curve and the settings of each run that trained it, first to last, from one
    read of its learning_curve.json; ([], []) when no head has been trained."""
    curve_file = _shipped_head_file(CURVE_NAME)
    return curve_file.get("curve", []), training_runs(curve_file)


def head_realistic_agreement() -> dict[str, list[float]]:
    """The shipped head's top-1 agreement by draft position on the realistic set, per category and "all"
    (`bench --agreement --save-beside`), or {} when it was not measured."""
    return _shipped_head_file(AGREEMENT_NAME).get("suites", {}).get("realistic", {})


# The template-trained head shipped before this one, on its own held-out prompts: top-1 and top-3 agreement.
EARLIER_HEAD_TOP1, EARLIER_HEAD_TOP3 = 0.50, 0.68
# The share of the first guess's misses that its second or third guess caught: a tree's best-of-3 at chain
# agreement a is a + (1 - a) x this share, never below a.
SECOND_GUESS_CATCH = (EARLIER_HEAD_TOP3 - EARLIER_HEAD_TOP1) / (1 - EARLIER_HEAD_TOP1)
CHAIN_AGREEMENT = 0.8  # the a slider's default


def tree_agreement(a: float) -> float:
    """Agreement of the best of the top-3 guesses per level, for chain agreement a (SECOND_GUESS_CATCH)."""
    return round(a + (1 - a) * SECOND_GUESS_CATCH, 2)


TREE_INTRO = f"""### Chains and trees
A chain drafts one guess per position; a **tree** (EAGLE-2, SpecInfer) drafts several, and one target pass checks
them all with a tree attention mask: each guess sees only its own ancestors. A level is accepted when *any* of its
guesses is right, so a tree gains where the draft's second or third choice is often the right one, and its agreement
is never below the chain's $a$ (the template-trained head shipped before this one: top-1 / top-3 agreement \
{EARLIER_HEAD_TOP1:.2f} / {EARLIER_HEAD_TOP3:.2f} with the target on its own held-out prompts, so its second and \
third guesses caught {SECOND_GUESS_CATCH:.0%} of the first guess's misses; the tree's slider starts there and rises \
with $a$). The price is a wider verification pass: on a GPU nearly free, on a CPU measured by $T(n)/T(1)$ in \
section 4. So the app sizes every tree from this machine's curve: of the guesses ranked by their path's draft \
probability (the tokens each is expected to add), it keeps the number that gives the most expected tokens per unit \
of the step's cost, the wider pass and the drafting together. The race tab draws each step's tree."""

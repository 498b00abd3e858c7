"""The page in headless Debian Chromium, served as a Space serves it (the deployed files alone, the embedded
model fetched at start; tests/app/conftest.py): start a race, see coloured tokens and a chart, save a screenshot.

Run alone with `pytest -m browser`. SPECDEC_SCREENSHOT=path keeps the screenshot there
(the README's picture is made this way); by default it goes to pytest's tmp_path.
"""

import os
import re
from pathlib import Path

import pytest
import torch

from tests.app.conftest import values

pytestmark = pytest.mark.browser
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture(scope="module")
def app_url(space_app):
    return space_app.url


@pytest.fixture(scope="module")
def page():
    playwright_sync = pytest.importorskip("playwright.sync_api")
    assert Path(CHROMIUM).exists(), "Debian chromium is not installed (apt-get install -y chromium)"
    with playwright_sync.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1700})
        yield page
        browser.close()


def plotly(page, element: str) -> dict:
    """The data and layout plotly drew in a gr.Plot (the graph div carries them); x and y as lists (a numpy array
    reaches the page as base64 with its dtype)."""
    figure = page.evaluate(
        f"() => {{ const g = document.querySelector('{element} .js-plotly-plot'); "
        "return {data: g.data, layout: g.layout}; }"
    )
    for trace in figure["data"]:
        trace.update({axis: values(trace[axis]) for axis in ("x", "y") if trace.get(axis) is not None})
    return figure


def summary_cell(page, row: str) -> str:
    """The speculative column of a summary row."""
    return page.locator("#race-summary tr", has_text=row).locator("td").nth(1).inner_text()


def race_again(page, timeout_ms: int = 180_000) -> None:
    page.get_by_role("button", name="Race", exact=True).click()
    page.wait_for_selector("#race-summary table.summary", state="detached", timeout=60_000)
    page.wait_for_selector("#race-summary table.summary", timeout=timeout_ms)


def set_slider(page, element: str, value: int) -> None:
    page.locator(f"{element} input[type='number']").fill(str(value))
    page.locator(f"{element} input[type='number']").press("Tab")


def choose(page, element: str, option: str) -> None:
    page.locator(f"{element} input").click()
    page.get_by_role("option", name=option, exact=False).click()


def test_race_shows_coloured_tokens_and_a_chart(app_url, page, tmp_path):
    page.goto(app_url)
    running = page.locator("#running-line").inner_text()
    assert (
        "SmolLM2-135M-Instruct (embedded" in running and "n-gram lookup + EAGLE tree" in running and "on CPU" in running
    )
    race = page.get_by_role("button", name="Race", exact=True)
    # the first race of a fresh Space waits for its warm-up: conversion and this machine's costs,
    # timed once
    race.click()
    page.wait_for_selector("#race-summary table.summary", timeout=360_000)
    race.click()  # a second race in the same session replaces the first
    page.wait_for_selector("#race-summary table.summary", state="detached", timeout=60_000)
    page.wait_for_selector("#spec-pane .tok-accepted", timeout=120_000)
    page.wait_for_selector("#race-charts [data-testid='plotly']", timeout=60_000)
    page.wait_for_selector("#race-summary table.summary", timeout=120_000)
    accepted = page.locator("#spec-pane .tok-accepted")
    assert accepted.count() > 0
    titles = [accepted.nth(i).get_attribute("title") for i in range(accepted.count())]
    assert all("argmax match: yes" in title and "target p=" in title for title in titles)  # greedy: the rule's own
    assert "identical" in page.locator("#race-summary").inner_text()
    assert page.locator("#plain-pane .tok-target").count() > 0
    shot = Path(os.environ.get("SPECDEC_SCREENSHOT", tmp_path / "race.png"))
    page.screenshot(path=str(shot), full_page=True)
    assert shot.stat().st_size > 20_000


def test_the_pages_numbers_agree_with_each_other(app_url, page):
    """Slider steps = steps with a draft, the plain passes stated; the charts end at the table's values."""
    passes = summary_cell(page, "target passes")  # "90 = 44 + 46 (+6 saved)"
    total, drafted, plain = (int(n) for n in re.match(r"(\d+) = (\d+) \+ (\d+)", passes).groups())
    assert total == drafted + plain
    assert (
        f"Step with a draft: {drafted} of them; the run also took {plain} plain passes"
        in page.locator("#tree-step").inner_text()
    )
    charts = plotly(page, "#race-charts")
    speedup = next(t for t in charts["data"] if t.get("xaxis") == "x4")
    assert f"{speedup['y'][-1]:.2f}×" == summary_cell(page, "speedup")
    rates = {t["name"]: t["y"][-1] for t in charts["data"] if t.get("name") in ("target only", "speculative")}
    table = page.locator("#race-summary tr", has_text="tokens / s").locator("td")
    assert [f"{rates['target only']:.1f}", f"{rates['speculative']:.1f}"] == [
        table.nth(0).inner_text(),
        table.nth(1).inner_text(),
    ]
    drawn = {t.get("name") for t in charts["data"] if t.get("showlegend") is not False and t.get("x")}
    assert {t.get("name") for t in charts["data"] if t.get("showlegend") is not False} == drawn  # legend = drawn


def show_step(page, number, step: int, tries: int = 3) -> None:
    """Types a step into the tree view's number box until the view shows it: a value typed while the box is being
    re-rendered by the step before can be lost, and is typed again (each try waits 15 s)."""
    shown = f"document.querySelector('#tree-view .gtitle').textContent.startsWith('Step {step} of')"
    for attempt in range(tries):
        number.fill(str(step))
        number.press("Enter")
        try:
            page.wait_for_function(shown, timeout=15_000)
            return
        except Exception:  # noqa: BLE001  (playwright's TimeoutError: type it again, or fail on the last try)
            if attempt == tries - 1:
                raise


def test_the_tree_legend_tells_lookup_from_head_guesses(app_url, page):
    """Step back through the default hybrid's race to a step where both the lookup and the head proposed nodes."""
    sources = summary_cell(page, "accepted drafts by source")
    assert "lookup" in sources and "head" in sources
    steps = int(re.search(r"Step with a draft: (\d+)", page.locator("#tree-step").inner_text()).group(1))
    number = page.locator("#tree-step input[type='number']")
    for step in range(steps, 0, -1):
        show_step(page, number, step)
        key = plotly(page, "#tree-view")["layout"]["annotations"][0]["text"]
        if "◆ lookup guess" in key and "● head guess" in key:
            symbols = {
                s for t in plotly(page, "#tree-view")["data"] for s in (t.get("marker") or {}).get("symbol") or []
            }
            assert {"diamond", "circle"} <= symbols
            return
    pytest.fail("no step of the hybrid's race drew both lookup and head guesses")


def test_tree_view_follows_the_race_and_replays_a_step(app_url, page, tmp_path):
    choose(page, "#drafter", "EAGLE head, tree")
    race_again(page)
    page.wait_for_selector("#tree-view [data-testid='plotly']", timeout=60_000)
    title = page.locator("#tree-view .gtitle").text_content()  # SVG text: no inner_text
    assert title.startswith("Step ") and ("a tree of" in title or "a chain of" in title)
    total = int(title.split(" of ")[1].split(" ")[0])
    assert page.locator("#tree-view .scatterlayer .trace").count() >= 3  # edges, nodes, the target's token
    assert page.locator("#spec-pane .tok-marker").count() > 0 and page.locator("#spec-pane .tok-rejected").count() == 0
    number = page.locator("#tree-step input[type='number']")
    number.fill("1")
    number.press("Enter")
    page.wait_for_function(
        "document.querySelector('#tree-view .gtitle').textContent.startsWith('Step 1 of')", timeout=30_000
    )
    assert total >= 1
    shot = Path(os.environ.get("SPECDEC_TREE_SCREENSHOT", tmp_path / "tree.png"))
    page.screenshot(path=str(shot), full_page=True)
    page.get_by_label("Show refused drafts inline").check()
    page.wait_for_selector("#spec-pane .tok-rejected", timeout=30_000)
    page.get_by_label("Show refused drafts inline").uncheck()


@pytest.mark.parametrize(
    "drafter, rule",
    [
        ("EAGLE draft head trained here (1 layer), chain", "kept with min(1, p/q)="),
        ("n-gram lookup + EAGLE", "kept with p(x)="),
    ],
)
def test_sampled_races_show_each_rule_and_its_picture(app_url, page, tmp_path, drafter, rule):
    choose(page, "#drafter", drafter)
    page.get_by_label("sampling").check()
    set_slider(page, "#race-tokens", 48)  # enough for accepted and refused drafts under the rule
    race_again(page)
    titles = page.locator("#spec-pane .tok-accepted").evaluate_all("nodes => nodes.map(n => n.title)")
    assert titles and any(rule in title for title in titles)
    assert all("argmax" not in title for title in titles)
    page.wait_for_selector("#rule-picture [data-testid='plotly']", timeout=30_000)
    meta = plotly(page, "#rule-picture")["layout"]["meta"]
    assert meta["accepted_mass"]  # the deciding node tried at least one child
    assert all(abs(a + b - 1) < 1e-4 for a, b in zip(meta["accepted_mass"], meta["residual_mass"], strict=True))
    name = "sampled-chain" if "chain" in drafter else "sampled-tree"
    page.screenshot(path=str(Path(os.environ.get("SPECDEC_SHOTS", tmp_path)) / f"{name}.png"), full_page=True)
    page.locator("#rule-picture").screenshot(
        path=str(Path(os.environ.get("SPECDEC_SHOTS", tmp_path)) / f"rule-{name}.png")
    )
    page.get_by_label("greedy").check()
    set_slider(page, "#race-tokens", 96)


def test_explainer_replays_the_last_race_and_shows_this_machines_costs(app_url, page):
    page.get_by_role("tab", name="Explainer").click()
    page.wait_for_selector("table.step", timeout=30_000)
    assert "Step 1 of" in page.locator(".step-detail").inner_text()
    page.wait_for_selector("#theory-chart [data-testid='plotly']", timeout=30_000)
    assert page.locator("#theory-chart .scatterlayer .trace").count() >= 4  # ideal, with the curve, your k, the star
    page.wait_for_selector("#cost-curve [data-testid='plotly']", timeout=30_000)
    costs = page.locator("#machine-costs").inner_text()
    assert "Measured on this machine" in costs and "T(5)/T(1)" in costs and "c = " in costs
    page.get_by_text("Kernel timings by pass width").click()  # behind an accordion: not on the lesson's path
    page.wait_for_selector("#kernel-table table", timeout=30_000)
    kernels = page.locator("#kernel-table").inner_text()
    assert (
        kernels.count("target linears") == 1 and "target linears: " in kernels and " for 1" in kernels
    )  # the kernel by width
    assert "packed (oneDNN)" in kernels and "stock (F.linear)" in kernels  # and each one's timing by width, a table
    assert ("packed (MKL)" in kernels) == torch.backends.mkl.is_available()
    page.wait_for_selector("#explainer-rule-picture [data-testid='plotly']", timeout=30_000)
    if shot := os.environ.get("SPECDEC_COSTS_SCREENSHOT"):  # the machine's costs alone, to look at
        page.locator("#machine-costs").screenshot(path=shot)


def test_workload_check_shows_its_configuration_outputs_and_copy_flag(app_url, page, tmp_path):
    page.get_by_role("tab", name="Workload check").click()
    for name in ("structured (JSON, code edit, list, extraction, copying)", "creative (poem, story, brainstorm)"):
        page.get_by_role("checkbox", name=name).uncheck()
    page.get_by_role("checkbox", name="your prompts").check()
    copying = "Repeat exactly, word for word: the quick brown fox jumps over the lazy dog near the river bank."
    page.get_by_label("Your prompts, one per line").fill(f"{copying}\nName three colours.")
    for slider, value in (("#workload-repeats", 2), ("#workload-tokens", 24)):
        set_slider(page, slider, value)
    page.get_by_role("button", name="Run workload check").click()
    page.wait_for_selector("#workload-status :text('Per set')", timeout=300_000)
    config = page.locator("#workload-config").inner_text()
    assert "this app's engine" in config and "n-gram lookup + EAGLE" in config and "24" in config
    assert "2 (median and min–max" in config and "AVX" in config and "Commit" in config
    table = page.locator("#workload-table").inner_text()
    assert "⚠ copies" in table  # the copying prompt is flagged, and only it
    assert table.count("⚠ copies") == 1
    page.wait_for_function(
        "() => [...document.querySelectorAll('textarea')].some(t => t.value.startsWith('Repeat exactly'))",
        timeout=30_000,
    )  # the output viewer shows the first prompt and its whole output
    assert "mostly copies the prompt" in page.locator("#workload-output-note").inner_text()
    page.screenshot(path=str(Path(os.environ.get("SPECDEC_SHOTS", tmp_path)) / "workload-check.png"), full_page=True)
    page.get_by_role("tab", name="Race").click()

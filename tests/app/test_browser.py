"""The page in headless Debian Chromium, served as a Space serves it (the deployed files alone, the embedded
model fetched at start; tests/app/conftest.py): start a race, see coloured tokens and a chart, save a screenshot.

Run alone with `pytest -m browser`. SPECDEC_SCREENSHOT=path keeps the screenshot there
(the README's picture is made this way); by default it goes to pytest's tmp_path.
"""

import os
from pathlib import Path

import pytest
import torch

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
    title = accepted.first.get_attribute("title")
    assert "draft q=" in title and "target p=" in title and "accept prob=" in title
    assert "identical" in page.locator("#race-summary").inner_text()
    assert page.locator("#plain-pane .tok-target").count() > 0
    shot = Path(os.environ.get("SPECDEC_SCREENSHOT", tmp_path / "race.png"))
    page.screenshot(path=str(shot), full_page=True)
    assert shot.stat().st_size > 20_000


def test_tree_view_follows_the_race_and_replays_a_step(app_url, page, tmp_path):
    page.locator("#drafter input").click()
    page.get_by_role("option", name="EAGLE head, tree", exact=False).click()
    page.get_by_role("button", name="Race", exact=True).click()
    page.wait_for_selector("#race-summary table.summary", state="detached", timeout=60_000)
    page.wait_for_selector("#race-summary table.summary", timeout=180_000)
    page.wait_for_selector("#tree-view [data-testid='plotly']", timeout=60_000)
    title = page.locator("#tree-view .gtitle").text_content()  # SVG text: no inner_text
    assert title.startswith("Step ") and ("a tree of" in title or "a chain of" in title)
    total = int(title.split(" of ")[1].split(":")[0])
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


def test_explainer_replays_the_last_race_and_shows_this_machines_costs(app_url, page):
    page.get_by_role("tab", name="Explainer").click()
    page.wait_for_selector("table.step", timeout=30_000)
    assert "Step 1 of" in page.locator(".step-detail").inner_text()
    page.wait_for_selector("#theory-chart [data-testid='plotly']", timeout=30_000)
    assert page.locator("#theory-chart .scatterlayer .trace").count() >= 4  # ideal, with the curve, your k, the star
    page.wait_for_selector("#cost-curve [data-testid='plotly']", timeout=30_000)
    costs = page.locator("#machine-costs").inner_text()
    assert "Measured on this machine" in costs and "T(5)/T(1)" in costs and "c = " in costs
    assert (
        costs.count("target linears") == 1 and "target linears: " in costs and " for 1" in costs
    )  # the kernel by width
    assert "packed (oneDNN)" in costs and "stock (F.linear)" in costs  # and each one's timing by width, a table
    assert ("packed (MKL)" in costs) == torch.backends.mkl.is_available()
    if shot := os.environ.get("SPECDEC_COSTS_SCREENSHOT"):  # the machine's costs alone, to look at
        page.locator("#machine-costs").screenshot(path=shot)

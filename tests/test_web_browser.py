"""The page in headless Chromium (Debian's /usr/bin/chromium driven by Playwright): fill the form,
submit, see the table and four charts, expand a row, follow a permalink, see a bad input's
message. The tests start `gpuplan serve` themselves on a free loopback port; screenshots go to
tests/artifacts/ (not committed). `.ci/run` installs chromium, so nothing here skips."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from playwright.sync_api import expect, sync_playwright

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / "tests" / "artifacts"
CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]
PLAN_TIMEOUT_MS = 30_000  # a plan view is ~1-3 s on this 2-core machine; 10x for a loaded CI


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def server():
    port = _free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    proc = subprocess.Popen([sys.executable, "-m", "gpuplan", "serve", "--port", str(port)],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            urllib.request.urlopen(url + "/openapi.json", timeout=1).close()
            break
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError("gpuplan serve did not start: "
                                   + proc.stderr.read().decode()[-500:]) from None
            time.sleep(0.1)
    yield url
    proc.terminate()
    proc.wait(timeout=10)


@pytest.fixture(scope="module")
def browser():
    assert Path(CHROMIUM).exists(), "install Debian's chromium (.ci/run does)"
    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield b
        b.close()


@pytest.fixture
def page(browser):
    ctx = browser.new_context(viewport={"width": 1400, "height": 1000})
    p = ctx.new_page()
    yield p
    ctx.close()


def _shot(page, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


def test_plan_form_table_charts_row_permalink(server, page):
    page.goto(server + "/")
    expect(page.locator("#model option[value='llama3-70b']")).to_have_count(1)  # catalog loaded
    page.select_option("#model", "llama3-8b")
    page.fill("input[name=tokens]", "1T")
    page.fill("input[name=deadline_days]", "30")
    page.click("#submit")
    rows = page.locator("#plans tbody tr.plan")
    expect(rows.first).to_be_visible(timeout=PLAN_TIMEOUT_MS)
    assert rows.count() >= 3
    for chart in ("pareto", "memory", "outlook", "buy-rent"):
        expect(page.locator(f".charts svg[data-chart='{chart}']")).to_be_visible()
    assert page.locator("svg[data-chart='pareto'] g.point").count() >= 3
    assert page.locator("#excluded tbody tr").count() >= 1
    _shot(page, "plan")
    rows.first.click()  # expand: memory breakdown and the command that reproduces it
    detail = page.locator("#plans tbody tr.detail").first
    expect(detail).to_be_visible()
    expect(detail.locator("table.memory")).to_contain_text("optimizer")
    expect(detail.locator("code")).to_contain_text("gpuplan estimate --model llama3-8b")
    _shot(page, "plan-row")
    link = page.locator("#permalink").get_attribute("href")
    assert "deadline_days=30" in link and "tokens=1T" in link
    first_gpu = rows.first.locator("td").nth(1).inner_text()
    page.goto(server + "/" + link)  # the permalink alone reproduces the plan
    rows = page.locator("#plans tbody tr.plan")
    expect(rows.first).to_be_visible(timeout=PLAN_TIMEOUT_MS)
    assert page.input_value("input[name=deadline_days]") == "30"
    assert rows.first.locator("td").nth(1).inner_text() == first_gpu


def test_bad_input_shows_the_cli_message(server, page):
    page.goto(server + "/")
    page.fill("input[name=tokens]", "1T")
    page.fill("input[name=gpu]", "h10")
    page.click("#submit")
    err = page.locator("#error")
    expect(err).to_be_visible(timeout=PLAN_TIMEOUT_MS)
    expect(err).to_contain_text("unknown GPU 'h10'; did you mean 'h100-sxm'")
    expect(page.locator("#output")).to_be_hidden()
    _shot(page, "bad-input")

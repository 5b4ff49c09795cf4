"""`kernorch report DIR` (issue 16): one self-contained HTML page of the plan, opened in a real
headless browser (Debian's chromium-headless-shell, or chromium); the test fails on a JavaScript
error or an empty page and leaves its screenshot in the test's folder."""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "tiny_cnn.onnx"
BROWSERS = ("chromium-headless-shell", "chromium", "chromium-browser", "google-chrome", "chrome")


def kernorch(tmp_path, *argv) -> subprocess.CompletedProcess:
    exe = Path(sys.executable).parent / "kernorch"
    script = [str(exe)] if exe.exists() else [shutil.which("kernorch") or "kernorch"]
    env = {**os.environ, "KERNORCH_DB": str(tmp_path / "tuning.sqlite")}
    return subprocess.run(script + [str(a) for a in argv], capture_output=True, text=True, env=env, timeout=600,
                          cwd=tmp_path)


def browser() -> str | None:
    return next((b for b in map(shutil.which, BROWSERS) if b), None)


def open_in_browser(page: Path, screenshot: Path) -> str:
    """The page's DOM after its scripts ran, and a screenshot, from a headless browser."""
    exe = browser()
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--window-size=1300,1400"]
    url = page.resolve().as_uri()
    shot = subprocess.run([exe, *flags, f"--screenshot={screenshot}", url], capture_output=True, text=True,
                          timeout=120)
    assert shot.returncode == 0 and screenshot.exists(), shot.stderr[-2000:]
    dom = subprocess.run([exe, *flags, "--dump-dom", url], capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    return dom.stdout


def body_of(dom: str) -> str:
    m = re.search(r"<body([^>]*)>", dom)
    assert m, dom[:500]
    return m.group(1)


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("html")
    r = kernorch(tmp, "compile", EXAMPLE, "-o", "tiny", "--cost", "model", "--quiet", "--no-compare")
    assert r.returncode == 0, r.stderr
    r = kernorch(tmp, "report", "tiny", "--repeat", "3")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[0] == "report    tiny/report.html"
    return tmp / "tiny" / "report.html"


def test_the_page_holds_the_plan(report):
    text = report.read_text()
    assert "<script src" not in text and "http://" not in text.replace("http://www.w3.org/2000/svg", "")
    for needle in ("One inference, kernel by kernel", "Latency against the runtimes users run today",
                   "The plan next to the baselines", "per-operator", "greedy", "Primitive graph, coloured by kernel",
                   "onnxruntime"):
        assert needle in text, needle
    prims = re.findall(r'<circle class="prim" data-k="(\d+)"', text)
    kernels = re.findall(r'<tr class="kernel" data-k="(\d+)"', text)
    bars = re.findall(r'<rect class="kbar" data-k="(\d+)"', text)
    # tiny_cnn's 32 prims after the default rewrites, plus the layout pairs (4 views per convolution)
    assert len(prims) == 40 and kernels and len(bars) == len(kernels)
    assert set(prims) == set(kernels)   # every kernel colours at least one prim
    assert report.with_suffix(".png").stat().st_size > 2000


@pytest.mark.skipif(browser() is None, reason="no headless browser (apt-get install chromium-headless-shell)")
def test_the_page_in_a_headless_browser(report, tmp_path):
    shot = tmp_path / "report.png"
    body = body_of(open_in_browser(report, shot))
    assert 'data-ready="1"' in body and "data-error" not in body, body
    assert shot.stat().st_size > 20_000   # a rendered page, not a blank one
    from PIL import Image

    img = Image.open(shot).convert("RGB")
    colours = img.getcolors(maxcolors=1 << 20)
    assert colours is not None and len(colours) > 50   # text, graph and bars, not an empty canvas


@pytest.mark.skipif(browser() is None, reason="no headless browser (apt-get install chromium-headless-shell)")
def test_the_browser_check_sees_a_script_error(report, tmp_path):
    broken = tmp_path / "broken.html"
    broken.write_text(report.read_text().replace("document.body.dataset.ready = '1';",
                                                 "undefinedFunction(); document.body.dataset.ready = '1';"))
    body = body_of(open_in_browser(broken, tmp_path / "broken.png"))
    assert 'data-ready="1"' not in body and "data-error" in body


def test_write_report_from_python(tmp_path, monkeypatch):
    """The Python face: kernorch.runtime.html_report.write_report(model, path, source=...)."""
    import kernorch
    from kernorch.runtime.html_report import write_report

    monkeypatch.setenv("KERNORCH_DB", str(tmp_path / "tuning.sqlite"))
    model = kernorch.compile(str(EXAMPLE), cost="model", progress=False)
    page, png = write_report(model, tmp_path / "plan.html", source=EXAMPLE, repeat=2, compare=False)
    text = page.read_text()
    assert page == tmp_path / "plan.html" and "<h2>Kernels</h2>" in text and "per-operator" in text
    assert png is None or png.stat().st_size > 2000
    page, _ = write_report(model, tmp_path / "bare.html", repeat=2, compare=False, baselines=False)
    assert "The plan next to the baselines" not in page.read_text()

"""The README and the docs/ pages stay honest: their Python examples run, their commands exist and
parse, their relative links resolve, and CI runs the README's second command."""

import re
import shlex
from pathlib import Path

import pytest

from kernorch.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
PAGES = sorted((ROOT / "docs").glob("*.md"))
DOCS = [ROOT / "README.md", *PAGES]


def _blocks(lang: str, text: str = README) -> list[str]:
    return re.findall(rf"^```{lang}\n(.*?)^```", text, flags=re.S | re.M)


def _quick_start() -> list[str]:
    return [ln for ln in _blocks("bash")[0].splitlines() if ln and not ln.startswith("#")]


def test_top_shows_exactly_two_commands():
    install_and_run, test = _quick_start()
    assert install_and_run.startswith("pip install -e . && kernorch ")
    assert "examples/tiny_cnn.onnx" in install_and_run
    assert test == "pip install -e '.[test]' && python -m pytest"


def test_ci_runs_the_second_command_exactly():
    script = (ROOT / ".ci" / "run").read_text().splitlines()
    assert script[0] == "#!/usr/bin/env bash" and "set -euo pipefail" in script
    assert _quick_start()[1] in script


def test_first_command_uses_existing_subcommands_and_files():
    parser = build_parser()
    for part in _quick_start()[0].split("&&"):
        argv = shlex.split(part)
        if argv[0] == "kernorch":
            args = parser.parse_args(argv[1:])
            if hasattr(args, "model"):
                assert (ROOT / args.model).exists()


def test_readme_is_short_and_links_every_docs_page():
    """Issue 45: the README is the front page (at most 200 lines); reference material lives in docs/."""
    assert len(README.splitlines()) <= 200
    missing = [p.name for p in PAGES if f"(docs/{p.name})" not in README]
    assert not missing, f"README.md does not link {missing}"


_PYTHON = [(path, k) for path in DOCS for k in range(len(_blocks("python", path.read_text())))]


@pytest.mark.parametrize("path,k", _PYTHON, ids=[f"{p.relative_to(ROOT)}:{k}" for p, k in _PYTHON])
def test_python_examples_run(path, k, monkeypatch, tmp_path):
    """Each block runs in a temp dir (it may save models) that sees the repo's examples/, and
    checks what it shows with an assert (a block that asserts nothing proves only that it runs)."""
    name = path.relative_to(ROOT)
    block = _blocks("python", path.read_text())[k]
    assert re.search(r"^\s*assert ", block, flags=re.M), f"{name} python block {k} asserts nothing"
    if "torch" in block:
        pytest.importorskip("torch")
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    monkeypatch.chdir(tmp_path)
    exec(compile(block, f"{name} python block {k}", "exec"), {})


def _command_lines() -> list[tuple[str, str]]:
    """Concrete `kernorch ...` lines of the code blocks (no [optional] or ... placeholders)."""
    out = []
    for path in DOCS:
        for block in _blocks(r"[a-z]*", path.read_text()):
            for ln in block.splitlines():
                ln = ln.removeprefix("$ ")
                if ln.startswith("kernorch ") and not re.search(r"\[|\.\.\.|\|", ln):
                    out.append((str(path.relative_to(ROOT)), ln))
    return out


def test_commands_in_code_blocks_parse():
    """A documented command line that the parser refuses (a renamed flag, a dropped subcommand)."""
    lines = _command_lines()
    assert any(name == "docs/TUNING.md" for name, _ in lines)
    parser = build_parser()
    for name, ln in lines:
        argv = shlex.split(ln, comments=True)
        try:
            args = parser.parse_args(argv[1:])
        except SystemExit as e:  # --version prints and exits 0
            assert e.code == 0, f"{name}: `{ln}` does not parse"
            continue
        model = getattr(args, "model", None)
        if isinstance(model, str) and model.startswith("examples/"):
            assert (ROOT / model).exists(), f"{name}: {model}"


def _anchors(text: str) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-")
            for h in re.findall(r"^#+ (.*)$", text, flags=re.M)}


def test_relative_links_resolve():
    """Text moved from the README into docs/ once kept links relative to the old place."""
    broken = []
    for path in DOCS:
        text = re.sub(r"^```.*?^```", "", path.read_text(), flags=re.S | re.M)
        text = re.sub(r"`[^`\n]*`", "", text)
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):
                continue
            file, _, anchor = target.partition("#")
            dest = (path.parent / file).resolve() if file else path
            if not dest.exists():
                broken.append(f"{path.relative_to(ROOT)}: {target}")
            elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest.read_text()):
                broken.append(f"{path.relative_to(ROOT)}: {target} (no such heading)")
    assert not broken, broken

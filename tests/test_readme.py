"""The README stays honest: its Python examples run, its commands exist, and CI runs its second command."""

import re
import shlex
from pathlib import Path

import pytest

from kernorch.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def _blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", README, flags=re.S)


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


@pytest.mark.parametrize("k", range(len(_blocks("python"))))
def test_python_examples_run(k, monkeypatch, tmp_path):
    """Each block runs in a temp dir (it may save models) that sees the repo's examples/, and
    checks what it shows with an assert (a block that asserts nothing proves only that it runs)."""
    block = _blocks("python")[k]
    assert re.search(r"^\s*assert ", block, flags=re.M), f"README python block {k} asserts nothing"
    if "torch" in block:
        pytest.importorskip("torch")
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    monkeypatch.chdir(tmp_path)
    exec(compile(block, f"README.md python block {k}", "exec"), {})

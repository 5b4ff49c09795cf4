"""The line budget: no kernorch module over 450 lines (tinygrad's sz.py idea, STYLE.md §1). A module
that grows past it is split along a seam, one job per module, not trimmed by squeezing lines."""

from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "kernorch"
MAX_LINES = 450


def test_no_module_over_the_line_budget():
    sizes = {p.relative_to(PKG.parent): len(p.read_text().splitlines())
             for p in PKG.rglob("*.py") if "__pycache__" not in p.parts}
    assert sizes, f"no modules under {PKG}"
    over = sorted(f"{p}: {n} lines" for p, n in sizes.items() if n > MAX_LINES)
    assert not over, f"modules over {MAX_LINES} lines (split them by responsibility):\n" + "\n".join(over)

"""Figures come from bench/results: the generator's check mode on the real README and docs, and a hand edit caught.

No Spark: docgen.readme_figures only reads JSON and text.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from docgen import readme_figures
from docgen.depth_figure import PICTURES
from docgen.figures import ROOT, Results
from docgen.readme_figures import main

FIGURE = re.compile(r"\d+\.\d+")


def test_readme_figures_match_the_results_files(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["--check"])
    assert code == 0, "README.md or docs/ differ from bench/results; run `python -m docgen.readme_figures`:\n" + (
        capsys.readouterr().out
    )


def copy_of_the_docs(tmp_path: Path) -> Path:
    """README.md, docs/ and the pictures copied under `tmp_path`, which then stands for the repository root."""
    shutil.copy(ROOT / "README.md", tmp_path / "README.md")
    shutil.copytree(ROOT / "docs", tmp_path / "docs")
    return tmp_path


def holder(root: Path, block: str) -> Path:
    """The one Markdown file under `root` that holds `block`."""
    (found,) = [
        p for p in [root / "README.md", *(root / "docs").rglob("*.md")] if f"<!-- figures:{block} -->" in p.read_text()
    ]
    return found


def hand_edit(text: str, block: str) -> tuple[str, str, str]:
    """`text` with the first decimal figure inside `block` changed; (edited text, old figure, new figure)."""
    start = text.index(f"<!-- figures:{block} -->")
    match = FIGURE.search(text, start, text.index(f"<!-- /figures:{block} -->"))
    assert match is not None
    old = match[0]
    new = old[:-1] + str((int(old[-1]) + 1) % 10)
    return text[: match.start()] + new + text[match.end() :], old, new


@pytest.mark.parametrize("block", ["compare-anchors", "performance", "absorb-time", "depth-picture", "big-table"])
def test_a_hand_edited_figure_is_detected_and_rewritten(
    block: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = copy_of_the_docs(tmp_path)
    page = holder(root, block)
    original = page.read_text(encoding="utf-8")
    edited, old, new = hand_edit(original, block)
    page.write_text(edited, encoding="utf-8")

    assert main(["--check", "--root", str(root)]) == 1
    diff = capsys.readouterr().out
    assert any(line.startswith("-") and new in line for line in diff.splitlines())
    assert any(line.startswith("+") and old in line for line in diff.splitlines())
    assert page.read_text(encoding="utf-8") == edited, "--check must not write"

    assert main(["--root", str(root)]) == 0
    assert page.read_text(encoding="utf-8") == original


def test_a_stale_picture_is_detected_and_redrawn(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = copy_of_the_docs(tmp_path)
    picture = root / next(iter(PICTURES))
    original = picture.read_text(encoding="utf-8")
    picture.write_text(original.replace('polyline points="', 'polyline points="0,0 ', 1), encoding="utf-8")
    assert main(["--check", "--root", str(root)]) == 1
    assert main(["--root", str(root)]) == 0
    assert picture.read_text(encoding="utf-8") == original


def test_a_removed_or_doubled_block_is_an_error(tmp_path: Path) -> None:
    root = copy_of_the_docs(tmp_path)
    page = holder(root, "memory")
    text = page.read_text(encoding="utf-8")
    start, end = (
        text.index("<!-- figures:memory -->"),
        text.index("<!-- /figures:memory -->") + len("<!-- /figures:memory -->"),
    )
    page.write_text(text[:start] + text[end:], encoding="utf-8")
    assert main(["--check", "--root", str(root)]) == 2
    (root / "docs" / "extra.md").write_text(text[start:end] * 2 + "\n", encoding="utf-8")
    assert main(["--check", "--root", str(root)]) == 2


def test_newest_file_per_benchmark_by_the_date_in_its_name(tmp_path: Path) -> None:
    for name in ("merge-2026-01-02", "merge-2025-12-31", "merge-quick-2026-03-01", "merge-readers-2026-04-01"):
        (tmp_path / f"{name}.json").write_text(json.dumps({"name": name}), encoding="utf-8")
    results = Results(tmp_path)
    assert results.get("merge") == ("merge-2026-01-02.json", {"name": "merge-2026-01-02"})
    assert results.newest_name("merge-quick") == "merge-quick-2026-03-01.json"
    assert results.newest_name("stream") is None


def test_figures_have_three_significant_digits() -> None:
    assert [readme_figures.num(x) for x in (2.9, 0.98066, 14.0, 20.11, 0.0075778, 0, 115.5, 1048.9)] == [
        "2.90",
        "0.981",
        "14.0",
        "20.1",
        "0.00758",
        "0",
        "116",
        "1,049",
    ]
    assert readme_figures.whole(60.0) == "60"
    assert readme_figures.whole(2.818) == "2.82"

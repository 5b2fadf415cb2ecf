"""docs/architecture.md describes the code as built: its module map names every package and module of the product,
and nothing that is gone; no comment cites a design document outside the repository."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("recluster", "triggers", "jobs")
MODULE_MAP = "## Modules"


def module_map() -> str:
    """The `## Modules` section of docs/architecture.md."""
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    assert MODULE_MAP in text, "docs/architecture.md has no module map"
    section = text.split(MODULE_MAP, 1)[1]
    return section.split("\n## ", 1)[0]


def product_paths() -> set[str]:
    """Every package (`recluster/engine/`) and module (`recluster/engine/handler.py`) of the product."""
    paths = set()
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            relative = path.relative_to(ROOT)
            paths.add(f"{relative.parent.as_posix()}/")
            if path.name != "__init__.py":
                paths.add(relative.as_posix())
    return paths


def test_the_module_map_names_every_package_and_module_and_nothing_else() -> None:
    named = set(re.findall(r"`((?:recluster|triggers|jobs)/[\w/]*(?:\.py)?)`", module_map()))
    actual = product_paths()
    assert not actual - named, f"modules missing from docs/architecture.md: {sorted(actual - named)}"
    assert not named - actual, f"docs/architecture.md names what is not there: {sorted(named - actual)}"


def test_every_module_line_says_what_the_module_does() -> None:
    for line in module_map().splitlines():
        if re.match(r"\|\s*`(recluster|triggers|jobs)/", line):
            cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
            assert len(cells) >= 2 and len(cells[-1]) > 10, f"a module without its job: {line}"


def test_no_comment_cites_a_document_outside_the_repository() -> None:
    outside = re.compile(r"DESIGN(\.md)?\s*§|shared/DESIGN|\.\./shared")
    offenders = [
        str(path.relative_to(ROOT))
        for top in (*PACKAGES, "bench", "docgen", "tests", "docs")
        if (ROOT / top).exists()
        for path in (ROOT / top).rglob("*")
        if path.suffix in {".py", ".md"}
        and path != Path(__file__).resolve()
        and outside.search(path.read_text(encoding="utf-8"))
    ]
    assert offenders == []

"""The examples of README.md and docs/ run as written, checked the cheap way (no Spark, no table): every `recluster`
command line of a ```bash block parses with the CLI's own parser (and a `recluster sql` statement with the statement
parser), every `./dev` command is one `./dev` knows, every ```sql line parses, every ```yaml block that is not a
Kubernetes manifest loads as recluster settings. Synopses that are not runnable (`[--flag]`, `TABLE_URI`) go in
```text blocks. README's links point at files and headings that exist, and reach the pages a newcomer looks for.
"""

from __future__ import annotations

import re
import shlex
import textwrap
from pathlib import Path

import pytest
import yaml
from markdown.extensions.toc import slugify

from recluster.cli.parser import build_parser
from recluster.core.sql import parse_statement
from recluster.settings import load_settings

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^(?P<indent> *)```(?P<lang>[a-z]*)\n(?P<body>.*?)^(?P=indent)```$", re.MULTILINE | re.DOTALL)
LINK = re.compile(r"\]\((?P<target>[^)\s]+)\)")
HEADING = re.compile(r"^#{1,6} (?P<title>.+?)\s*$", re.MULTILINE)
ASSIGNMENT = re.compile(r"^[A-Z_][A-Z0-9_]*=")


def blocks(lang: str) -> list[tuple[str, str]]:
    """(where, body) of every ```lang block of README.md and docs/*.md."""
    found = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for match in FENCE.finditer(text):
            if match["lang"] == lang:
                line = text.count("\n", 0, match.start()) + 1
                found.append((f"{page.relative_to(ROOT)}:{line}", textwrap.dedent(match["body"])))
    return found


def command_lines(body: str) -> list[list[str]]:
    """Shell words of each command of a bash block: continuations joined, comments and `VAR=...` prefixes dropped."""
    commands = []
    for line in body.replace("\\\n", " ").splitlines():
        words = shlex.split(line, comments=True)
        while words and ASSIGNMENT.match(words[0]):
            words = words[1:]
        if words:
            commands.append(words)
    return commands


def dev_commands() -> set[str]:
    """The commands `./dev` dispatches on (its case labels)."""
    return set(re.findall(r"^  ([a-z-]+)\)", (ROOT / "dev").read_text(encoding="utf-8"), re.MULTILINE))


BASH = [(where, words) for where, body in blocks("bash") for words in command_lines(body)]
RECLUSTER = [(where, words[1:]) for where, words in BASH if words[0] == "recluster"]


def test_the_docs_have_examples_of_every_kind() -> None:
    assert len(RECLUSTER) >= 20 and blocks("sql") and len(blocks("yaml")) >= 4


@pytest.mark.parametrize(("where", "args"), RECLUSTER, ids=[f"{w} {' '.join(a)[:40]}" for w, a in RECLUSTER])
def test_every_recluster_command_line_parses(where: str, args: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    try:
        parsed = build_parser().parse_args(args)
    except SystemExit:
        pytest.fail(f"{where}: `recluster {shlex.join(args)}` does not parse: {capsys.readouterr().err.strip()}")
    if parsed.command == "sql":
        parse_statement(parsed.statement)


def test_every_dev_command_exists() -> None:
    known = dev_commands()
    used = {(where, words[1]) for where, words in BASH if words[0] == "./dev"}
    first = {("README.md:5", "demo"), ("README.md:5", "test")}
    assert first <= used, "README's first commands are ./dev demo and ./dev test"
    assert not [(where, name) for where, name in used if name not in known]


@pytest.mark.parametrize(("where", "body"), blocks("sql"), ids=[w for w, _ in blocks("sql")])
def test_every_sql_example_parses(where: str, body: str) -> None:
    for line in body.splitlines():
        statement = line.split("--")[0].strip()
        if statement:
            parse_statement(statement)


@pytest.mark.parametrize(("where", "body"), blocks("yaml"), ids=[w for w, _ in blocks("yaml")])
def test_every_settings_example_loads(where: str, body: str, tmp_path: Path) -> None:
    data = yaml.safe_load(body)
    if isinstance(data, dict) and {"apiVersion", "kind"} <= set(data):
        return  # a Kubernetes manifest, validated with k8s/ by tests/test_k8s.py
    file = tmp_path / "config.yaml"
    file.write_text(body, encoding="utf-8")
    load_settings(file)


def anchors(page: Path) -> set[str]:
    """The heading ids MkDocs gives `page` (its toc slugify over the heading's text without Markdown)."""
    titles = HEADING.findall(re.sub(r"^ *```.*?^ *```$", "", page.read_text(encoding="utf-8"), flags=re.M | re.S))
    return {slugify(re.sub(r"`|\[([^\]]*)\]\([^)]*\)", r"\1", title), "-") for title in titles}


def test_readme_links_reach_existing_pages_and_headings() -> None:
    readme = ROOT / "README.md"
    broken = []
    for target in LINK.findall(readme.read_text(encoding="utf-8")):
        if "://" in target:
            continue
        path, _, anchor = target.partition("#")
        page = ROOT / path
        if not page.exists() or (anchor and anchor not in anchors(page)):
            broken.append(target)
    assert not broken


def test_a_newcomer_reaches_the_main_pages_in_one_click_from_the_readme() -> None:
    linked = {target.partition("#")[0] for target in LINK.findall((ROOT / "README.md").read_text(encoding="utf-8"))}
    wanted = {"getting-started", "configuration", "kubernetes", "guarantees", "performance", "commands", "concepts"}
    assert {f"docs/{name}.md" for name in wanted} <= linked

"""The tokens and the recursive-descent parser both SQL grammars share (statements in `sql`, WHERE predicates in
`sql_predicates`): errors name the column and the offending token. Pure: no I/O.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from recluster.core.table_names import quoted


class SqlError(ValueError):
    """A statement that does not parse; the message names the column and the offending token."""


_TOKEN = re.compile(
    r"""\s*(?:
    (?P<number>-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)
    |(?P<string>'(?:[^']|'')*')
    |(?P<dquoted>"(?:[^"]|"")*")
    |(?P<quoted>`(?:[^`]|``)*`)
    |(?P<op><=|>=|<>|!=|=|<|>|\(|\)|,|\.|;)
    |(?P<word>[A-Za-z_][A-Za-z0-9_]*)
    )""",
    re.VERBOSE,
)


@dataclass(frozen=True, slots=True)
class Token:
    kind: str
    text: str
    position: int

    @property
    def upper(self) -> str:
        return self.text.upper() if self.kind == "word" else self.text


def tokenize(text: str) -> list[Token]:
    tokens: list[Token] = []
    position = 0
    while position < len(text):
        if text[position:].strip() == "":
            break
        match = _TOKEN.match(text, position)
        if match is None or match.end() == position:
            start = len(text) - len(text[position:].lstrip())
            raise SqlError(f"syntax error at column {start + 1}: unexpected character {text[start]!r}")
        kind = match.lastgroup or "op"
        tokens.append(Token(kind, match.group(kind), match.start(kind)))
        position = match.end()
    tokens.append(Token("end", "", len(text)))
    return tokens


class Parser:
    """A cursor over a statement's tokens (`offset`: where the text starts in its statement, so errors point right)."""

    def __init__(self, text: str, offset: int = 0) -> None:
        self.tokens = [Token(t.kind, t.text, t.position + offset) for t in tokenize(text)]
        self.index = 0

    @property
    def current(self) -> Token:
        return self.tokens[self.index]

    def ahead(self, count: int) -> Token:
        """The token `count` places after the current one; the end token past the statement's end."""
        return self.tokens[min(self.index + count, len(self.tokens) - 1)]

    def error(self, expected: str) -> SqlError:
        token = self.current
        found = "end of statement" if token.kind == "end" else repr(token.text)
        return SqlError(f"syntax error at column {token.position + 1}: expected {expected}, found {found}")

    def accept(self, *words: str) -> bool:
        if self.current.upper in words and self.current.kind in ("word", "op"):
            self.index += 1
            return True
        return False

    def expect(self, *words: str) -> None:
        if not self.accept(*words):
            raise self.error(" or ".join(words))

    def take(self) -> Token:
        token = self.current
        self.index += 1
        return token

    def identifier(self, what: str = "a column name") -> str:
        token = self.current
        if token.kind == "word":
            return self.take().text
        if token.kind in ("quoted", "dquoted"):
            return unquote(self.take().text)
        raise self.error(what)

    def table(self) -> str:
        """delta.`URI` or a quoted path (the location), or a name `db.table` / `catalog.db.table` (its parts
        backquoted when needed), returned as the command line takes it (docs/discovery.md#tables-by-name)."""
        token, following = self.current, self.ahead(1)
        if token.upper == "DELTA" and following.text == "." and self.ahead(2).kind == "quoted":
            self.index += 2
            return unquote(self.take().text)
        if token.kind in ("word", "quoted") and following.text == ".":
            parts = [self.name_part()]
            while self.accept("."):
                parts.append(self.name_part())
            return ".".join(quoted(part) for part in parts)
        if token.kind in ("string", "quoted", "dquoted"):
            return unquote(self.take().text)
        raise self.error("a table (db.table, catalog.db.table, delta.`URI` or a quoted path)")

    def name_part(self) -> str:
        token = self.current
        if token.kind == "word":
            return self.take().text
        if token.kind == "quoted":
            return unquote(self.take().text)
        raise self.error("a name after .")

    def end(self) -> None:
        self.accept(";")
        if self.current.kind != "end":
            raise self.error("end of statement")


def unquote(text: str) -> str:
    """A quoted string or name without its quotes, a doubled quote inside read as one."""
    quote = text[0]
    return text[1:-1].replace(quote * 2, quote)

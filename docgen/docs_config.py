"""Writes the settings reference of docs/configuration.md from recluster/settings*.py: `python -m docgen.docs_config
[--check]`.

The reference sits between `<!-- settings:reference -->` and `<!-- /settings:reference -->` and is generated from the
pydantic models themselves: every field with its default, its type and bounds, and its docstring (read from the
source with `ast`, since the models keep their field docs as attribute docstrings), so it cannot drift from the code.
With `--check` the command prints a diff and exits 1 when the page differs from what it would write (`./dev docs`).
"""

from __future__ import annotations

import argparse
import ast
import difflib
import enum
import inspect
import re
import sys
import types
import typing
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import annotated_types
from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from docgen.figures import ROOT
from recluster import settings
from recluster.core.optimizing import PROPERTY_NAMES
from recluster.settings_optimizing import SelfOptimizingSettings

PAGE = ROOT / "docs" / "configuration.md"
BLOCK = re.compile(r"(<!-- settings:reference -->\n).*?(<!-- /settings:reference -->)", re.DOTALL)
BOUNDS = {annotated_types.Gt: ">", annotated_types.Ge: ">=", annotated_types.Lt: "<", annotated_types.Le: "<="}
UNITS = ((1 << 30, "GiB"), (1 << 20, "MiB"))


def field_docs(module: types.ModuleType) -> dict[str, dict[str, str]]:
    """Attribute docstrings of every class in `module`: class name -> field name -> docstring, joined into one line."""
    docs: dict[str, dict[str, str]] = {}
    for node in ast.parse(inspect.getsource(module)).body:
        if not isinstance(node, ast.ClassDef):
            continue
        fields = docs.setdefault(node.name, {})
        for field, after in zip(node.body, node.body[1:], strict=False):
            documented = isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant)
            if isinstance(field, ast.AnnAssign) and isinstance(field.target, ast.Name) and documented:
                fields[field.target.id] = " ".join(str(after.value.value).split())  # type: ignore[attr-defined]
    return docs


def type_name(annotation: Any) -> str:
    """`float`, `int | null`, `absorb | levels`, `map`, `list of str`: what a YAML value may be."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Literal:
        return " \\| ".join(str(a) for a in args)
    if origin in (typing.Union, types.UnionType):
        return " \\| ".join(type_name(a) for a in args)
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return " \\| ".join(str(m.value) for m in annotation)
    if origin is dict:
        return "map"
    if origin is list:
        return (
            "list" if isinstance(args[0], type) and issubclass(args[0], BaseModel) else f"list of {type_name(args[0])}"
        )
    if annotation is type(None):
        return "null"
    return str(getattr(annotation, "__name__", annotation))


def bounds(info: FieldInfo) -> str:
    return ", ".join(f"{BOUNDS[type(m)]} {getattr(m, next(iter(m.__dataclass_fields__)))}" for m in info.metadata)


def shown(value: Any, name: str) -> str:
    """A default as YAML would spell it (byte sizes with their unit beside them)."""
    if value is None:
        return "`null`"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, enum.Enum):
        return f"`{value.value}`"
    if isinstance(value, BaseModel):
        return "see below"
    if isinstance(value, dict):
        plain = {k: v.model_dump() if isinstance(v, BaseModel) else v for k, v in value.items()}
        return f"`{plain}`".replace("'", "")
    if isinstance(value, int) and value >= 1 << 20 and ("bytes" in name or "size" in name):
        unit = next(((size, name) for size, name in UNITS if value % size == 0), None)
        return f"`{value}`" + (f" ({value // unit[0]} {unit[1]})" if unit else "")
    return f"`{value}`"


def default(name: str, info: FieldInfo) -> str:
    if info.default is not PydanticUndefined:
        return shown(info.default, name)
    if info.default_factory is None:
        return "required"
    made = info.default_factory()  # type: ignore[call-arg]
    return shown(made, name) if isinstance(made, dict | list | BaseModel) else "computed (see meaning)"


def nested(annotation: Any) -> tuple[type[BaseModel], str] | None:
    """The model a field holds (itself, as the values of a map, as list items, or optional) and how its keys are
    spelled."""
    args = typing.get_args(annotation)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation, ""
    if typing.get_origin(annotation) is dict and isinstance(args[1], type) and issubclass(args[1], BaseModel):
        return args[1], ".<name>"
    if typing.get_origin(annotation) is list and isinstance(args[0], type) and issubclass(args[0], BaseModel):
        return args[0], "[]"
    models = [a for a in args if isinstance(a, type) and issubclass(a, BaseModel)]
    if typing.get_origin(annotation) in (typing.Union, types.UnionType) and len(models) == 1:
        return models[0], ""  # an optional section (`discovery.leases`)
    return None


def sections(model: type[BaseModel], prefix: str) -> Iterator[tuple[str, type[BaseModel]]]:
    """(dotted name, model) of `model` and of every model below it, depth first."""
    yield prefix, model
    for name, info in model.model_fields.items():
        if found := nested(info.annotation):
            yield from sections(found[0], f"{prefix}.{name}{found[1]}" if prefix else f"{name}{found[1]}")


def reference() -> str:
    models = list(sections(settings.Settings, ""))
    modules = dict.fromkeys(sys.modules[model.__module__] for _, model in models)  # settings.py and its section modules
    docs = {name: fields for module in modules for name, fields in field_docs(module).items()}
    out: list[str] = []
    for prefix, model in models:
        doc = inspect.cleandoc(model.__doc__ or "") if model is not settings.Settings else ""
        out.append(f"### `{prefix}`" if prefix else "### Top level")
        if doc and not doc.startswith("Usage docs"):
            out.append(" ".join(doc.split()))
        rows = ["| setting | default | type | meaning |", "| --- | --- | --- | --- |"]
        for name, info in model.model_fields.items():
            if nested(info.annotation) and typing.get_origin(info.annotation) is None:
                continue
            meaning = docs.get(model.__name__, {}).get(name, "")
            if model is SelfOptimizingSettings and name in PROPERTY_NAMES:
                meaning = f"{meaning} Table property: `{PROPERTY_NAMES[name]}`.".strip()
            limits = bounds(info)
            kind = type_name(info.annotation) + (f" ({limits})" if limits else "")
            dotted = f"{prefix}.{name}" if prefix else name
            cells = [f"`{dotted}`", default(name, info), kind, meaning.replace("|", "\\|")]
            rows.append("| " + " | ".join(cells) + " |")
        if len(rows) > 2:
            out.append("\n".join(rows))
    return "\n\n".join(out) + "\n"


def render(text: str) -> str:
    if not BLOCK.search(text):
        raise ValueError(f"no <!-- settings:reference --> block in {PAGE}")
    return BLOCK.sub(lambda m: f"{m[1]}{reference()}{m[2]}", text)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m docgen.docs_config", description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="print a diff and exit 1 if the page is out of date")
    parser.add_argument("--page", type=Path, default=PAGE, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    current = args.page.read_text(encoding="utf-8")
    try:
        generated = render(current)
    except ValueError as error:
        print(f"docs_config: error: {error}", file=sys.stderr)
        return 2
    if generated == current:
        return 0
    if args.check:
        name = str(args.page)
        lines = current.splitlines(keepends=True), generated.splitlines(keepends=True)
        sys.stdout.writelines(difflib.unified_diff(*lines, name, f"{name} (generated)"))
        print(f"\n{name} differs from recluster/settings*.py: run `python -m docgen.docs_config`", file=sys.stderr)
        return 1
    args.page.write_text(generated, encoding="utf-8")
    print(f"rewrote {args.page}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""What users hand the settings (recluster/settings.py) and what every section is made of: YAML files, `--set` values,
pydantic's validation errors as one line each, the base of every section and the byte units defaults are written in."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

GIB = 1 << 30
MIB = 1 << 20


class Section(BaseModel):
    """The base of every settings section: a key users misspell is refused (`extra="forbid"`), values are frozen."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class SettingsError(ValueError):
    """A bad configuration value or file, reported as one line naming the field."""


def read_config_file(path: Path) -> dict[str, Any]:
    """A YAML config file as a mapping; an unreadable or malformed file is one line naming where."""
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise SettingsError(f"cannot read config file {path}: {error.strerror}") from None
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(error, "problem", None) or str(error)
        raise SettingsError(f"malformed YAML in {path}{where}: {problem}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise SettingsError(f"config file {path} must hold a mapping, not {type(data).__name__}")
    return data


def override_value(raw: str) -> Any:
    """Scalars stay strings (pydantic validates them per field); `[...]`/`{...}` are YAML collections."""
    if raw.strip()[:1] in ("[", "{"):
        try:
            return yaml.safe_load(raw)
        except yaml.YAMLError as error:
            raise SettingsError(f"malformed value {raw!r}: {getattr(error, 'problem', error)}") from None
    return raw


def describe_validation_error(error: ValidationError) -> str:
    """One line per problem: the dotted field name, pydantic's message and the offending value."""
    parts = []
    for item in error.errors():
        field = ".".join(str(p) for p in item["loc"]) or "settings"
        secret = "storage_options" in item["loc"]  # credentials: name the field, never echo the value
        shown = "input" in item and not isinstance(item["input"], dict) and not secret
        got = f" (got {item['input']!r})" if shown else ""
        parts.append(f"invalid setting {field}: {item['msg']}{got}")
    return "; ".join(parts)

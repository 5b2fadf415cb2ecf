"""What every command shares: settings from --config/--set, one-line errors, exit codes, JSON output."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

from pydantic import BaseModel, ValidationError

from recluster.settings import Settings, SettingsError, describe_validation_error, load_settings
from recluster.settings_job import KafkaSettings

if TYPE_CHECKING:
    pass


SectionT = TypeVar("SectionT", bound=BaseModel)


EXIT_ERROR = 1


EXIT_USAGE = 2


class UsageError(Exception):
    """Bad command-line input that argparse itself cannot catch."""


class OneLineErrorParser(argparse.ArgumentParser):
    """argparse whose errors are one line, like every other error of the command line."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"recluster: error: {message} (see {self.prog} --help)\n")


def parse_partition(values: Sequence[str] | None) -> dict[str, str]:
    partition = {}
    for item in values or []:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise UsageError(f"--partition {item!r} is not of the form column=value")
        partition[name] = value
    return partition


def settings_of(args: argparse.Namespace) -> Settings:
    curve = getattr(args, "curve", None)
    return load_settings(args.config, [*(args.set or []), *([f"clustering.curve={curve}"] if curve else [])])


def print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")


def check_kafka(settings: KafkaSettings) -> None:
    """Before anything starts: a broker that refuses these client settings (TLS, SASL) is one line and exit 2."""
    from recluster.engine.kafka_access import kafka_problem

    problem = kafka_problem(settings)
    if problem is not None:
        raise UsageError(problem)


def updated_section(section: SectionT, values: Mapping[str, Any]) -> SectionT:
    """A settings section with command-line values, validated like every other source."""
    try:
        return type(section).model_validate({**section.model_dump(), **values})
    except ValidationError as error:
        raise SettingsError(describe_validation_error(error)) from None

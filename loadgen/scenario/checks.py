"""The value checks of a scenario file's keys: each returns what is wrong with a value
(completing "KEY ...", e.g. "must be > 0, got -1"), or None when it is fine."""

from __future__ import annotations

import math
import re

from ..bounds import host_problem, input_tokens_problem, output_tokens_problem, shown
from ..cloudwatch_settings import PUBLISH_FREQUENCIES_S
from ..errors import ConfigError
from ..slo import parse_slo
from ..targetspec import SIMULATOR, target_kind

_LABEL = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*\Z")  # becomes part of a file name


def positive(value: float) -> str | None:
    return None if value > 0 and math.isfinite(value) else f"must be > 0, got {value:g}"


def input_count(value: int) -> str | None:
    """A positive token count within the input bound (:mod:`loadgen.bounds`)."""
    return positive(value) or input_tokens_problem(value, "is")


def output_count(value: int) -> str | None:
    """A positive token count within the output bound (:mod:`loadgen.bounds`)."""
    return positive(value) or output_tokens_problem(value, "is")


def non_negative(value: float) -> str | None:
    return None if value >= 0 and math.isfinite(value) else f"must be >= 0, got {value:g}"


def fraction(value: float) -> str | None:
    return None if 0 <= value <= 1 else f"must be between 0 and 1, got {value:g}"


def one_of(*choices: str):
    def check(value: str) -> str | None:
        return None if value in choices else f"must be one of {', '.join(choices)}, got {value!r}"
    return check


def url_check(value: str) -> str | None:
    try:
        if target_kind(value) != SIMULATOR:  # the one parser of target URLs
            return None
    except ConfigError:
        problem = host_problem(value)
        if problem and not value.startswith("sagemaker:"):
            return problem
    return f"must be http(s)://HOST:PORT or sagemaker://ENDPOINT_NAME, got {shown(value)}"


def label_check(value: str) -> str | None:
    if _LABEL.match(value):
        return None
    return (f"must be letters, digits, '.', '_' or '-' (it names the file phase-LABEL.json), "
            f"got {value!r}")


def price(value: float) -> str | None:
    if value > 0 and math.isfinite(value):
        return None
    return f"must be a positive number of dollars per hour (e.g. 1.1267), got {value:g}"


def publish_frequency(value: int) -> str | None:
    if value in PUBLISH_FREQUENCIES_S:
        return None
    return (f"must be one of {', '.join(map(str, PUBLISH_FREQUENCIES_S))} seconds (SageMaker's "
            f"MetricPublishFrequencyInSeconds), got {value}")


def non_empty(value: str) -> str | None:
    return None if value.strip() else "must not be empty"


def port_check(value: int) -> str | None:
    return None if 0 <= value < 65536 else f"must be 1-65535 (0: a free port), got {value}"


def slo_check(value: str) -> str | None:
    try:
        parse_slo(value)
    except ConfigError as exc:
        return str(exc).replace("--slo ", "SLO ", 1)
    return None

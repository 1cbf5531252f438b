"""Structured logging for the three binaries: text or JSON lines, klog-style verbosity.

Usage in a module::

    log = logging.getLogger(__name__)
    log.info("removed taint %s", key, extra=kv(node=name))     # V0
    log.log(V2, "settling for %.1fs", delay, extra=kv(node=name))
    log.debug("candidate table %s", table)                     # shown at --v >= 4

Verbosity mapping: `V0` is `logging.INFO` (20) and
`Vn` is `20 - n`, so `V5` is 15; `logging.DEBUG` (10) is treated as verbosity 4. A
record is emitted when its verbosity is ≤ `--v` (values above 5 act as 5); WARNING and
ERROR are always emitted. Lines print these as level `INFO` (JSON adds `"v"`) or `DEBUG`.

Tokens never reach the output: `Bearer …`, `Authorization: …` and JSON `"token"` values
are replaced by `[REDACTED]` in messages, keys and tracebacks.
"""

from __future__ import annotations

import json
import logging
import re
import sys
from collections.abc import Mapping
from datetime import UTC, datetime
from functools import cache
from typing import Any, Literal, TextIO

V0 = logging.INFO
V1 = logging.INFO - 1
V2 = logging.INFO - 2
V3 = logging.INFO - 3
V4 = logging.INFO - 4
V5 = logging.INFO - 5
MAX_VERBOSITY = 5
# Attribute on LogRecord carrying per-call key/values (see kv()).
KV_ATTR = "kv"

# (pattern, replacement) pairs, compiled on the first text that holds a credential word (most
# processes never log one; compiling them cost about 1 ms of every start).
_REDACTION_SOURCES = (
    (r"(?i)(\bbearer\s+)[^\s\"',;}]+", r"\1[REDACTED]"),
    (r"(?i)(\bbasic\s+)[A-Za-z0-9+/=]{8,}", r"\1[REDACTED]"),
    (r"(?i)(authorization[\"']?\s*[:=]\s*[\"']?)(?!bearer\b|basic\b)[^\s\"',;}]+", r"\1[REDACTED]"),
    (r"(?i)([\"']token[\"']\s*:\s*[\"'])[^\"']*", r"\1[REDACTED]"),
)


@cache
def _redactions() -> tuple[tuple[re.Pattern[str], str], ...]:
    return tuple((re.compile(pattern), replacement) for pattern, replacement in _REDACTION_SOURCES)


# Every redaction above needs one of these words: text without any is returned as it is, one
# search instead of four substitutions per message and value (most lines hold no credential).
_CREDENTIAL_WORD = re.compile(r"(?i)bearer|basic|authorization|token")
# A text value is quoted when it holds whitespace (str.isspace's set, as re's \s), '"', '=' or '\'.
_NEEDS_QUOTES = re.compile(r'[\s"=\\]')


def kv(**values: object) -> dict[str, Any]:
    """`extra=` argument carrying structured key/values for one log call."""
    return {KV_ATTR: values}


def redact(text: str) -> str:
    """Replace credentials in `text` by `[REDACTED]`."""
    if not _CREDENTIAL_WORD.search(text):
        return text
    for pattern, replacement in _redactions():
        text = pattern.sub(replacement, text)
    return text


def level_for_verbosity(verbosity: int) -> int:
    """The root logger's level at `--v=verbosity` (a handler filter does the exact gating)."""
    v = min(max(verbosity, 0), MAX_VERBOSITY)
    return logging.DEBUG if v >= 4 else logging.INFO - v


def _level_name(levelno: int) -> str:
    floors = ((logging.CRITICAL, "CRITICAL"), (logging.ERROR, "ERROR"),
              (logging.WARNING, "WARNING"), (V5, "INFO"))  # fmt: skip
    return next((name for floor, name in floors if levelno >= floor), "DEBUG")


def _verbosity(levelno: int) -> int | None:
    """The V-level of a record; None for WARNING and above (always emitted)."""
    if levelno >= logging.WARNING:
        return None
    if levelno >= V5:
        return max(0, logging.INFO - levelno)
    return 4 if levelno >= logging.DEBUG else MAX_VERBOSITY


class _VerbosityFilter(logging.Filter):
    """Exact V-level gate: at --v=4 DEBUG is on but V5 is not, which no threshold can say."""

    def __init__(self, verbosity: int) -> None:
        super().__init__()
        self._verbosity = min(max(verbosity, 0), MAX_VERBOSITY)

    def filter(self, record: logging.LogRecord) -> bool:
        v = _verbosity(record.levelno)
        return v is None or v <= self._verbosity


class _Formatter(logging.Formatter):
    """Shared part of both formats: redacted message, bound + per-call keys."""

    def __init__(self, component: str, bound: Mapping[str, str]) -> None:
        super().__init__()
        self._component = component
        self._bound = dict(bound)
        self._second: tuple[int, str] = (-1, "")  # the last second formatted, and its text

    def _timestamp(self, created: float) -> str:
        """UTC, milliseconds; the date and time of a second are formatted once (`strftime` was
        a sixth of a line's cost), rounded to the microsecond as `datetime.fromtimestamp`."""
        second = int(created)  # created > 0: int() is floor()
        micros = round((created - second) * 1_000_000)
        if micros == 1_000_000:
            second, micros = second + 1, 0
        if self._second[0] != second:
            moment = datetime.fromtimestamp(second, UTC)
            self._second = (second, moment.strftime("%Y-%m-%dT%H:%M:%S."))
        return f"{self._second[1]}{micros // 1000:03d}Z"

    def _keys(self, record: logging.LogRecord) -> dict[str, object]:
        keys: dict[str, object] = dict(self._bound)
        extra = getattr(record, KV_ATTR, None)
        if isinstance(extra, Mapping):
            keys.update(extra)
        return keys

    def _exception(self, record: logging.LogRecord) -> str | None:
        if record.exc_info:
            return redact(self.formatException(record.exc_info))
        if record.stack_info:
            return redact(self.formatStack(record.stack_info))
        return None


def _text_value(value: object) -> str:
    text = redact(str(value))
    if text and not _NEEDS_QUOTES.search(text):
        return text
    return json.dumps(text, ensure_ascii=False)


class TextFormatter(_Formatter):
    """`2026-11-21T12:00:00.123Z INFO logger message key=value …`."""

    def format(self, record: logging.LogRecord) -> str:
        parts = [
            self._timestamp(record.created),
            _level_name(record.levelno),
            record.name,
            redact(record.getMessage()),
        ]
        parts.extend(f"{key}={_text_value(value)}" for key, value in self._keys(record).items())
        line = " ".join(parts)
        exception = self._exception(record)
        return f"{line}\n{exception}" if exception else line


def _json_value(value: object) -> object:
    if isinstance(value, bool | int | float) or value is None:
        return value
    return redact(str(value))


class JsonFormatter(_Formatter):
    """One JSON object per line: `ts`, `level`, `v`, `logger`, `msg`, then the keys."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, object] = {
            "ts": self._timestamp(record.created),
            "level": _level_name(record.levelno),
        }
        verbosity = _verbosity(record.levelno)
        if verbosity is not None:
            line["v"] = verbosity
        line["logger"] = record.name
        line["msg"] = redact(record.getMessage())
        line["component"] = self._component
        for key, value in self._keys(record).items():
            line.setdefault(key, _json_value(value))
        exception = self._exception(record)
        if exception:
            line["error"] = exception
        return json.dumps(line, ensure_ascii=False, separators=(",", ":"), default=str)


class _Handler(logging.StreamHandler[TextIO]):
    """Marks the handler configure_logging() installed."""


def configure_logging(
    *,
    fmt: Literal["text", "json"],
    verbosity: int,
    component: str,
    bound: Mapping[str, str],
    stream: TextIO | None = None,
) -> None:
    """Install one line-oriented handler on the root logger (replacing ours, if any).

    `bound` key/values (e.g. `node`) appear on every line; `component` names the
    binary in JSON output. `stream` defaults to stderr.
    """
    # Where a call was made from, and its thread and process, are on no line: not collected
    # (the logging HOWTO's "Optimization"; finding the caller walks the stack for every line).
    logging._srcfile = None
    logging.logThreads = logging.logProcesses = logging.logMultiprocessing = False
    handler = _Handler(sys.stderr if stream is None else stream)
    formatter = TextFormatter if fmt == "text" else JsonFormatter
    handler.setFormatter(formatter(component, bound))
    handler.addFilter(_VerbosityFilter(verbosity))
    root = logging.getLogger()
    # Replace only our own handler, so calling this twice does not duplicate lines
    # and handlers installed by a host (pytest's capture) keep working.
    for old in [h for h in root.handlers if isinstance(h, _Handler)]:
        root.removeHandler(old)
        old.close()
    root.addHandler(handler)
    root.setLevel(level_for_verbosity(verbosity))

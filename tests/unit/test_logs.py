"""Log line formats, klog-style verbosity and credential redaction."""

from __future__ import annotations

import io
import json
import logging
import re
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Literal

import pytest

from local_ccm.logs import (
    V0,
    V1,
    V2,
    V3,
    V4,
    V5,
    JsonFormatter,
    TextFormatter,
    configure_logging,
    kv,
    level_for_verbosity,
    redact,
)

LOGGER = "local_ccm.agent.run"
CREATED = datetime(2026, 11, 21, 12, 0, 0, 123456, tzinfo=UTC).timestamp()


@pytest.fixture
def stream() -> Iterator[io.StringIO]:
    """Configure logging into a buffer and put the root logger back afterwards."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield io.StringIO()
    for handler in root.handlers:
        if handler not in handlers:
            root.removeHandler(handler)
    root.setLevel(level)


def record(msg: str, *args: object, level: int = V0, **keys: object) -> logging.LogRecord:
    made = logging.LogRecord(LOGGER, level, __file__, 1, msg, args, None)
    made.created = CREATED
    if keys:
        made.kv = keys
    return made


def test_text_line_is_time_level_logger_message_then_keys() -> None:
    line = TextFormatter("local-ccm", {"node": "n1"}).format(
        record("set %d addresses", 2, old="10.0.0.1", new="a b")
    )
    assert line == (
        "2026-11-21T12:00:00.123Z INFO local_ccm.agent.run set 2 addresses "
        'node=n1 old=10.0.0.1 new="a b"'
    )


def test_json_line_has_ts_level_logger_msg_and_keys() -> None:
    line = JsonFormatter("local-ccm", {"node": "n1"}).format(
        record("pass %s", "done", level=V3, uid="u-1", count=3, ok=True)
    )
    assert json.loads(line) == {
        "ts": "2026-11-21T12:00:00.123Z",
        "level": "INFO",
        "v": 3,
        "logger": LOGGER,
        "msg": "pass done",
        "component": "local-ccm",
        "node": "n1",
        "uid": "u-1",
        "count": 3,
        "ok": True,
    }
    assert "\n" not in line


def test_warnings_carry_no_verbosity_and_debug_reads_as_v4() -> None:
    formatter = JsonFormatter("c", {})
    assert "v" not in json.loads(formatter.format(record("w", level=logging.WARNING)))
    debug = json.loads(formatter.format(record("d", level=logging.DEBUG)))
    assert (debug["level"], debug["v"]) == ("DEBUG", 4)


def test_exceptions_are_appended_and_redacted() -> None:
    try:
        raise RuntimeError("header was Bearer s3cr3t")
    except RuntimeError:
        failed = logging.LogRecord(LOGGER, logging.ERROR, __file__, 1, "boom", (), None)
        failed.exc_info = sys.exc_info()
    text = TextFormatter("c", {}).format(failed)
    assert text.splitlines()[0].endswith("ERROR local_ccm.agent.run boom")
    assert "RuntimeError: header was Bearer [REDACTED]" in text
    assert "s3cr3t" not in JsonFormatter("c", {}).format(failed)


@pytest.mark.parametrize(
    ("verbosity", "emitted"),
    [
        (-1, ["V0"]),
        (0, ["V0"]),
        (1, ["V0", "V1"]),
        (2, ["V0", "V1", "V2"]),
        (3, ["V0", "V1", "V2", "V3"]),
        (4, ["V0", "V1", "V2", "V3", "V4", "DEBUG"]),  # not V5
        (5, ["V0", "V1", "V2", "V3", "V4", "V5", "DEBUG"]),
        (9, ["V0", "V1", "V2", "V3", "V4", "V5", "DEBUG"]),
    ],
)
def test_lines_up_to_the_verbosity_are_emitted_and_warnings_always(
    stream: io.StringIO, verbosity: int, emitted: list[str]
) -> None:
    configure_logging(fmt="text", verbosity=verbosity, component="c", bound={}, stream=stream)
    log = logging.getLogger(LOGGER)
    for name, level in [("V0", V0), ("V1", V1), ("V2", V2), ("V3", V3), ("V4", V4), ("V5", V5)]:
        log.log(level, name)
    log.debug("DEBUG")
    log.warning("WARNING")
    log.error("ERROR")
    messages = [line.split(" ")[3] for line in stream.getvalue().splitlines()]
    assert messages == [*emitted, "WARNING", "ERROR"]


def test_level_mapping_is_documented_klog_style() -> None:
    assert [level_for_verbosity(v) for v in range(7)] == [20, 19, 18, 17, 10, 10, 10]


def test_bound_keys_are_on_every_line_and_per_call_keys_override_nothing_else(
    stream: io.StringIO,
) -> None:
    configure_logging(
        fmt="json", verbosity=0, component="agent", bound={"node": "n1"}, stream=stream
    )
    log = logging.getLogger(LOGGER)
    log.info("first")
    log.warning("second %s", "arg", extra=kv(taint="node.cloudprovider.kubernetes.io/x"))
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert [line["node"] for line in lines] == ["n1", "n1"]
    assert lines[1]["msg"] == "second arg"
    assert lines[1]["taint"] == "node.cloudprovider.kubernetes.io/x"


def test_configuring_twice_replaces_our_handler(stream: io.StringIO) -> None:
    configure_logging(fmt="text", verbosity=0, component="c", bound={}, stream=io.StringIO())
    configure_logging(fmt="text", verbosity=0, component="c", bound={}, stream=stream)
    logging.getLogger(LOGGER).info("once")
    assert len(stream.getvalue().splitlines()) == 1


def test_text_timestamps_are_utc_rfc3339_with_milliseconds(stream: io.StringIO) -> None:
    configure_logging(fmt="text", verbosity=0, component="c", bound={}, stream=stream)
    logging.getLogger(LOGGER).info("now")
    assert re.fullmatch(
        r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z INFO local_ccm\.agent\.run now\n",
        stream.getvalue(),
    )


@pytest.mark.parametrize(
    "secret_text",
    [
        "Authorization: Bearer eyJhbGciOiJSUzI1NiJ9.e30.c2ln",
        "headers={'Authorization': 'Bearer abc123'}",
        "authorization=abc123",
        "Authorization: Basic dXNlcjpwYXNzd29yZA==",
        '{"status": {"token": "abc123"}}',
        "bearer abc123",
    ],
)
def test_credentials_are_redacted(secret_text: str) -> None:
    cleaned = redact(secret_text)
    assert "[REDACTED]" in cleaned
    for secret in ("abc123", "eyJhbGciOiJSUzI1NiJ9", "dXNlcjpwYXNzd29yZA"):
        assert secret not in cleaned


def test_tokens_are_redacted_in_messages_and_keys(stream: io.StringIO) -> None:
    formats: list[Literal["text", "json"]] = ["text", "json"]
    for fmt in formats:
        configure_logging(fmt=fmt, verbosity=0, component="c", bound={}, stream=stream)
        logging.getLogger(LOGGER).info(
            "sending %s", "Authorization: Bearer tok-1", extra=kv(header="Bearer tok-2")
        )
    output = stream.getvalue()
    assert "tok-1" not in output
    assert "tok-2" not in output
    assert output.count("[REDACTED]") == 4

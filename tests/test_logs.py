"""catalog.logs: the structured lines written without a LogRecord are the lines the formatter makes."""

from __future__ import annotations

import io
import logging

import orjson

from catalog import logs


def _capture(name: str) -> tuple[logging.Logger, io.StringIO, logging.StreamHandler]:
    logger = logging.getLogger(name)
    logger.propagate = False
    logger.setLevel(logging.INFO)
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logs.JsonFormatter())
    logger.handlers = [handler]
    return logger, stream, handler


def test_a_line_is_the_formatters_line_but_for_its_time():
    logger, stream, _ = _capture("catalog.test-logs-same")
    fields = {"method": "GET", "route": "/v1/x", "status": 200, "duration_ms": 0.12}
    token = logs.request_id.set("abc123")
    try:
        logger.info("%s", "GET /v1/x -> 200 in 0.1 ms", extra={"fields": fields})
        logs.line(logger, logging.INFO, "GET /v1/x -> 200 in 0.1 ms", fields)
    finally:
        logs.request_id.reset(token)
    ordinary, fast = (orjson.loads(line) for line in stream.getvalue().splitlines())
    assert list(ordinary) == list(fast)  # same keys, same order
    assert {k: v for k, v in ordinary.items() if k != "ts"} == {k: v for k, v in fast.items() if k != "ts"}
    assert fast["ts"].endswith("Z") and len(fast["ts"]) == len(ordinary["ts"])
    assert fast["request_id"] == "abc123" and fast["level"] == "info"


def test_other_set_ups_take_the_ordinary_path():
    """A text formatter, a filter, another kind of handler: the line goes through logging itself."""
    logger, stream, handler = _capture("catalog.test-logs-text")
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    logs.line(logger, logging.INFO, "hello", {"a": 1})
    assert stream.getvalue() == "INFO catalog.test-logs-text: hello\n"
    logger, stream, handler = _capture("catalog.test-logs-filter")
    handler.addFilter(lambda record: record.getMessage() != "dropped")
    logs.line(logger, logging.INFO, "dropped", {})
    logs.line(logger, logging.INFO, "kept", {})
    assert [orjson.loads(x)["message"] for x in stream.getvalue().splitlines()] == ["kept"]


def test_the_handlers_level_is_honoured():
    logger, stream, handler = _capture("catalog.test-logs-level")
    handler.setLevel(logging.WARNING)
    logs.line(logger, logging.INFO, "quiet", {})
    logs.line(logger, logging.WARNING, "loud", {})
    assert [orjson.loads(x)["message"] for x in stream.getvalue().splitlines()] == ["loud"]

"""Logs: readable text lines on a terminal, one JSON object per line otherwise (a log pipeline), or
whichever ``CATALOG_LOG_FORMAT`` (auto | json | text) asks for; JSON lines carry the request id of the
request being served.

Loggers: ``catalog`` (the server), ``catalog.access`` (one line per request: info, health probes and
``/metrics`` at debug), ``catalog.commit`` (one info line per landed commit, conflicts at warning),
``catalog.audit`` (kept at any level), ``catalog.events`` (a sink failing, delivering again, behind,
caught up: once per change, never per event). Libraries' chatter (Alembic's per-connection INFO
lines, httpx's line per webhook POST) is held at warning.
"""

from __future__ import annotations

import contextvars
import logging
import logging.config
import sys
import time
from typing import Any

import orjson

request_id: contextvars.ContextVar[str | None] = contextvars.ContextVar("request_id", default=None)

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
# Libraries whose INFO lines say nothing an operator needs (alembic: "Context impl ..." per check;
# httpx: "HTTP Request: POST ..." per event a webhook is sent, counted in the metrics instead).
_QUIET = ("alembic", "httpx")


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = _entry(
            record.created, record.levelname, record.name, record.getMessage(), getattr(record, "fields", None)
        )
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return orjson.dumps(entry).decode()


def _entry(created: float, levelname: str, name: str, message: str, fields: dict[str, Any] | None) -> dict[str, Any]:
    """A JSON line's object: the one shape of ``JsonFormatter`` and ``line``."""
    entry = {"ts": _timestamp(created), "level": levelname.lower(), "logger": name, "message": message}
    if rid := request_id.get():
        entry["request_id"] = rid
    if fields:  # structured lines (access, audit, commit, start-up)
        entry.update(fields)
    return entry


_second: tuple[int, str] = (-1, "")  # the last whole second formatted, and its text (swapped whole)


def _timestamp(created: float) -> str:
    """``2026-11-27T10:24:51.805Z``; the part up to the second is formatted once per second."""
    global _second
    whole = int(created)
    second, text = _second
    if second != whole:
        text = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(whole))
        _second = (whole, text)
    return f"{text}.{int((created - whole) * 1000):03d}Z"


def line(logger: logging.Logger, level: int, message: str, fields: dict[str, Any]) -> None:
    """``logger.log(level, message, extra={"fields": fields})``, the same line, for the structured
    lines written per request (access, audit) and per commit: when every handler the line reaches
    is a plain stream handler with the JSON formatter (the server's own set-up), the line is built
    once as JSON and written under the handler's lock, without a ``LogRecord`` (measured: ~25 us
    per loadTable of ~130 us). Any other set-up (text, filters, other handlers: a test's capture)
    takes the ordinary path. The caller has checked ``logger.isEnabledFor(level)``."""
    handlers = _plain_json_handlers(logger)
    if handlers is None:
        logger.log(level, "%s", message, extra={"fields": fields})
        return
    text = None
    for handler in handlers:
        if level < handler.level:
            continue
        if text is None:
            text = orjson.dumps(_entry(time.time(), logging.getLevelName(level), logger.name, message, fields))
            text = text.decode() + "\n"
        handler.acquire()
        try:
            handler.stream.write(text)
            handler.stream.flush()
        except Exception:  # noqa: BLE001 - a log line never fails a request (as logging's handleError)
            pass
        finally:
            handler.release()


def _plain_json_handlers(logger: logging.Logger) -> list[logging.StreamHandler] | None:
    """The handlers a line of ``logger`` reaches, if all are plain JSON stream handlers and no logger
    on the way filters; else None."""
    found: list[logging.StreamHandler] = []
    current: logging.Logger | None = logger
    while current is not None:
        if current.filters:
            return None
        for handler in current.handlers:
            if type(handler) is not logging.StreamHandler or handler.filters:
                return None
            if type(handler.formatter) is not JsonFormatter:
                return None
            found.append(handler)
        if not current.propagate:
            break
        current = current.parent  # type: ignore[assignment]
    return found or None


def resolve(fmt: str) -> str:
    """``json`` or ``text``: ``auto`` is text when stderr (where the logs go) is a terminal, else JSON."""
    if fmt == "auto":
        return "text" if sys.stderr.isatty() else "json"
    return fmt


def formatter(fmt: str = "json") -> logging.Formatter:
    """The formatter of ``fmt`` (auto | json | text). Also routes Python warnings (``warnings.warn``) into
    logging, so that they come out in the same format instead of as bare text: this runs first thing
    in every uvicorn worker process (``dict_config``)."""
    logging.captureWarnings(True)
    _lean()
    return JsonFormatter() if resolve(fmt) == "json" else logging.Formatter(TEXT_FORMAT)


def _lean() -> None:
    """What no line of ours shows is not collected per record (the logging module's documented
    optimisations): the caller's file and line (a stack walk), the thread, the process."""
    logging._srcfile = None  # type: ignore[attr-defined]
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False


def dict_config(level: str, fmt: str) -> dict[str, Any]:
    """The logging set-up as a ``logging.config`` dictionary: uvicorn applies it in the parent and in
    each worker process before anything else runs there, so every line of every process has the format."""
    root_level = level.upper()
    audit_level = logging.getLevelName(min(logging.INFO, logging.getLevelName(root_level)))
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"catalog": {"()": "catalog.logs.formatter", "fmt": fmt}},
        "handlers": {"stderr": {"class": "logging.StreamHandler", "formatter": "catalog"}},
        "root": {"handlers": ["stderr"], "level": root_level},
        "loggers": {
            # The audit trail (one line per mutating request and per refusal) is kept at any log level.
            "catalog.audit": {"level": audit_level},
            **{name: {"level": "DEBUG" if root_level == "DEBUG" else "WARNING"} for name in _QUIET},
        },
    }


def configure(level: str, fmt: str) -> None:
    logging.config.dictConfig(dict_config(level, fmt))

"""Logs: readable text lines on a terminal, one JSON object per line otherwise (a log pipeline), or
whichever ``CATALOG_LOG_FORMAT`` (auto | json | text) asks for; JSON lines carry the request id of the
request being served.

Loggers: ``catalog`` (the server), ``catalog.access`` (one line per request: info, health probes and
``/metrics`` at debug), ``catalog.commit`` (one info line per landed commit, conflicts at warning),
``catalog.audit`` (kept at any level). Libraries' chatter (Alembic's per-connection INFO lines) is
held at warning.
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
# Libraries whose INFO lines say nothing an operator needs (alembic: "Context impl ..." per check).
_QUIET = ("alembic",)


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        if rid := request_id.get():
            entry["request_id"] = rid
        if fields := getattr(record, "fields", None):  # structured lines (access, audit, commit, start-up)
            entry.update(fields)
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return orjson.dumps(entry).decode()


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
    return JsonFormatter() if resolve(fmt) == "json" else logging.Formatter(TEXT_FORMAT)


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

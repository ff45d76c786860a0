"""Structured logs: one JSON object per line on stderr (journald, Docker and log shippers take it as is).

Every record has ``ts`` (UTC, RFC 3339), ``level``, ``logger``, ``event`` (a stable snake_case name
to alert on) and the event's own fields. Use :func:`log_event` rather than formatting messages, so the
fields stay machine-readable.
"""
from __future__ import annotations

import datetime as _dt
import json
import logging
import sys
from typing import Any

LOGGER_NAME = "tailscope.agent"


def utc_now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": _dt.datetime.fromtimestamp(record.created, _dt.timezone.utc)
            .isoformat(timespec="milliseconds")
            .replace("+00:00", "Z"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "event": getattr(record, "event", None) or record.getMessage(),
        }
        fields = getattr(record, "fields", None)
        if fields:
            out.update(fields)
        elif getattr(record, "event", None) and record.getMessage() != record.event:
            out["message"] = record.getMessage()
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str, sort_keys=False)


def setup_logging(level: str = "info", stream=None) -> logging.Logger:
    logger = logging.getLogger(LOGGER_NAME)
    logger.handlers.clear()
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter())
    logger.addHandler(handler)
    logger.setLevel(level.upper())
    logger.propagate = False
    return logger


def get_logger(name: str = "") -> logging.Logger:
    return logging.getLogger(f"{LOGGER_NAME}.{name}" if name else LOGGER_NAME)


def log_event(logger: logging.Logger, level: int, event: str, exc_info: bool = False, **fields: Any) -> None:
    logger.log(level, event, extra={"event": event, "fields": fields}, exc_info=exc_info)

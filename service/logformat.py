"""JSON log lines (``CANTSTOP_LOG_FORMAT=json``): one object a line, for a log shipper to index.

The access log's fields are gunicorn's atoms (the request line with only the API's own query
values, service/gunicorn_settings.py), the request id among them; application and server
messages carry their level and logger. Text stays the default: people read it.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

ACCESS = "gunicorn.access"
# gunicorn's atoms, as the access line's JSON fields (``{name}o``: a response header).
ACCESS_FIELDS = {
    "remote": "h",
    "request": "r",
    "status": "s",
    "bytes": "b",
    "ms": "M",
    "request_id": "{x-request-id}o",
}
# The access line's text format, request id last (gunicorn's ``access_log_format``).
ACCESS_TEXT = '%(h)s "%(r)s" %(s)s %(b)s %(M)sms %({x-request-id}o)s'


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
        }
        fields = getattr(record, "access", None)  # the service's worker (service/server.py)
        if record.name == ACCESS and isinstance(fields, Mapping):
            line.update(fields)
        elif record.name == ACCESS and isinstance(record.args, Mapping):
            atoms = record.args  # gunicorn's SafeAtoms: a missing atom is "-", quotes escaped
            for field, atom in ACCESS_FIELDS.items():
                value = atoms[atom]
                line[field] = value.replace('\\"', '"') if isinstance(value, str) else value
        else:
            line["message"] = record.getMessage()
            if record.exc_info:
                line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, ensure_ascii=False)


def json_logger(base: type[Any]) -> type[Any]:
    """gunicorn's logger class ``base`` (its documented ``logger_class`` setting), writing JSON:
    once gunicorn has set its handlers, each of them is given the JSON formatter."""

    class JsonLogger(base):  # type: ignore[misc]
        def setup(self, cfg: Any) -> None:
            super().setup(cfg)
            for name in ("gunicorn.error", ACCESS):
                for handler in logging.getLogger(name).handlers:
                    handler.setFormatter(JsonFormatter())
            use_json()

    return JsonLogger


def use_json() -> None:
    """The service's own loggers (``cantstop.*``) write JSON lines to standard error."""
    logger = logging.getLogger("cantstop")
    if not any(isinstance(h.formatter, JsonFormatter) for h in logger.handlers):
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(JsonFormatter())
        logger.addHandler(handler)

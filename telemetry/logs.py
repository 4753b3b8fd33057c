"""`trace_id=` in every log line: a log record factory sets `record.trace_id` (the current trace's id,
or `-`), and the process's stream handlers (uvicorn's, the root's) print it at the end of each
record's first line."""

from __future__ import annotations

import logging
from typing import Any

from telemetry.tracing import current_trace_id

DEFAULT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class TraceFormatter(logging.Formatter):
    """Wraps a handler's formatter: its line, then ` trace_id=<id>` (before any traceback)."""

    def __init__(self, inner: logging.Formatter | None) -> None:
        super().__init__()
        self.inner = inner or logging.Formatter(DEFAULT_FORMAT)

    def format(self, record: logging.LogRecord) -> str:
        text = self.inner.format(record)
        tag = f" trace_id={getattr(record, 'trace_id', '-')}"
        first, newline, rest = text.partition("\n")
        return first + tag + newline + rest


def install(*, loggers: tuple[str, ...] = ("", "uvicorn", "uvicorn.error", "uvicorn.access")) -> None:
    """Give every log record a `trace_id` and the process's stream handlers a formatter that prints it.

    Idempotent. A process whose root logger has no handler gets one (WARNING and above to stderr, as
    Python's last-resort handler would print them), so its own warnings carry the trace id too.
    """
    factory = logging.getLogRecordFactory()
    if not getattr(factory, "b3os_trace", False):

        def make(*args: Any, **kwargs: Any) -> logging.LogRecord:
            record = factory(*args, **kwargs)
            record.trace_id = current_trace_id()
            return record

        make.b3os_trace = True  # type: ignore[attr-defined]
        logging.setLogRecordFactory(make)
    root = logging.getLogger()
    if not root.handlers:
        root.addHandler(logging.StreamHandler())
    for name in loggers:
        for handler in logging.getLogger(name).handlers:
            # only plain stream handlers (uvicorn's, ours): never a test runner's capture handler
            if type(handler) is logging.StreamHandler and not isinstance(handler.formatter, TraceFormatter):
                handler.setFormatter(TraceFormatter(handler.formatter))

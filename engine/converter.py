"""The data converter of every b3os Temporal client and worker: `DATA_CONVERTER`.

Payloads are JSON through pydantic (temporalio.contrib.pydantic). Failures carry their sentence, type and
details, and no stack trace: temporalio's default failure converter writes the Python traceback of the
exception (file paths of the server: the worker's virtualenv, engine/workflow.py, activities/...) into
`Failure.stack_trace`, which the Temporal UI shows after the sentence in a failed step's and a failed
run's panels. A run's failure is its sentence (engine.workflow); the traceback of an unforeseen error
stays in the worker's log, where the SDK logs it.

Only what a worker writes changes: a failure read back (an activity's, in the workflow; a run's, in the
api) converts as before, and replay never compares failures, so recorded histories replay unchanged.
"""

from __future__ import annotations

import dataclasses

from temporalio.api.failure.v1 import Failure
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.converter import DataConverter, DefaultFailureConverter, PayloadConverter

__all__ = ["DATA_CONVERTER", "SentenceFailureConverter"]


class SentenceFailureConverter(DefaultFailureConverter):
    """The default failure converter, without the stack traces (of the failure and of its causes)."""

    def to_failure(
        self, exception: BaseException, payload_converter: PayloadConverter, failure: Failure
    ) -> None:
        """See `temporalio.converter.FailureConverter.to_failure`; then clear every `stack_trace`."""
        super().to_failure(exception, payload_converter, failure)
        level: Failure | None = failure
        while level is not None:
            level.stack_trace = ""
            level = level.cause if level.HasField("cause") else None


DATA_CONVERTER: DataConverter = dataclasses.replace(
    pydantic_data_converter, failure_converter_class=SentenceFailureConverter
)
"""Pydantic payloads, failures without stack traces."""

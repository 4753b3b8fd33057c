"""Routines are read and checked in processes apart from the api's (`python -m api.runs.checker`).

Reading a routine is what a caller can make the api work longest at with one small request: a YAML file
of 160 KB holding 80 different expressions of 2,000 characters took 18 s of CPU to check (the CEL
parser builds ~11 tree nodes per list item), and in a thread of the api it held the interpreter's lock
all that time, so every other request of the process, whatever its organization, waited for it. A
checker is a process of its own: the api sends it the YAML, it answers the routine as it is stored, or
its problems. The api waits `routine_check_s` (`B3OS_ROUTINE_CHECK_S`, default 5 s) for the answer,
then kills the checker and refuses the routine with a sentence. Each api process keeps up to `CHECKERS`
checkers, started when first needed (the first store of a process waits ~1 s for one), and an
organization checks one routine at a time in a process (its other stores wait their turn), so one
organization's routines cannot take every checker. A checker reads the registry (each `uses:` resolved,
literal `with:` values checked against the action's inputSchema) from the api's database; it writes
nothing. Its address space is capped (`MEMORY_BYTES`): a routine that needs more is refused too. It runs
at a lower priority than the api (`NICE`).

The protocol, one JSON document per line: the api sends the database URL first, then `{"yaml": ...}`
per routine; the checker answers `{"routine": {...}}`, `{"problems": ["routine.yaml:line:col: ..."]}`,
or `{"failed": "..."}` (a fault of the checker's own: the api answers 503).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import resource
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from anyio import to_thread

from api.errors import InvalidRequest, ServiceUnavailable

log = logging.getLogger(__name__)

CHECKERS = 2
"""Checker processes an api process keeps at most (each ~100 MB resident once it has read a routine)."""

NICE = 10
"""A checker's scheduling priority, below the api's: on a busy machine, reading a routine waits for the
CPU that runs' starts and calls need, rather than they for it."""

MEMORY_BYTES = 2 * 1024**3
"""A checker's address space: a routine that needs more to be read is refused."""

STARTUP_S = 60
"""The longest a checker may take to start (import its modules, open the database)."""

FILENAME = "routine.yaml"
_LINE_LIMIT = 256 * 1024**2  # an answer is one line: a routine as stored is at most a few MiB
_OFF_LOOP_BYTES = 64 * 1024  # larger lines are encoded and decoded in a worker thread


class _Checker:
    """One checker process and its pipes."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process

    @classmethod
    async def start(cls, database_url: str, memory_bytes: int) -> _Checker:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "api.runs.checker",
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            limit=_LINE_LIMIT,
        )
        checker = cls(process)
        # not in argv, which `ps` shows to every user
        await checker._send(json.dumps([database_url, memory_bytes]).encode() + b"\n")
        assert process.stdout is not None
        try:  # its imports and CEL's parser take ~1 s: not counted in a routine's time
            ready = await asyncio.wait_for(process.stdout.readline(), STARTUP_S)
        except TimeoutError:
            ready = b""
        if ready != b"ready\n":
            await checker.end()
            raise OSError(f"it did not start within {STARTUP_S} s")
        return checker

    async def _send(self, line: bytes) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(line)
        await self.process.stdin.drain()

    async def ask(self, source: str) -> dict[str, Any]:
        line = await _off_loop(lambda: json.dumps({"yaml": source}).encode() + b"\n", len(source))
        await self._send(line)
        assert self.process.stdout is not None
        answer = await self.process.stdout.readline()
        if not answer:
            raise EOFError("the checker ended")
        data: dict[str, Any] = await _off_loop(lambda: json.loads(answer), len(answer))
        return data

    def kill(self) -> None:
        if self.process.returncode is None:
            self.process.kill()

    async def end(self) -> None:
        self.kill()
        await self.process.wait()


async def _off_loop(fn: Any, size: int) -> Any:
    return await to_thread.run_sync(fn) if size > _OFF_LOOP_BYTES else fn()


class Checkers:
    """The checker processes of one api process (see the module's docstring)."""

    def __init__(
        self, database_url: str, *, timeout_s: float, most: int = CHECKERS, memory_bytes: int = MEMORY_BYTES
    ) -> None:
        self._database_url = database_url
        self._timeout_s = timeout_s
        self._memory_bytes = memory_bytes
        self._slots = asyncio.Semaphore(most)
        self._idle: list[_Checker] = []
        self._turns: dict[str, tuple[asyncio.Lock, list[int]]] = {}  # per org: its lock, stores in it

    async def check(self, org_id: str, source: str) -> dict[str, Any]:
        """The routine as it is stored (`Routine.model_dump(mode="json", by_alias=True,
        exclude_unset=True)`), checked against the registry.

        Raises:
            InvalidRequest: the routine has problems (each `line:column: message` in `problems`), or
                could not be checked within the time or memory a routine may take.
            ServiceUnavailable: a checker could not start or failed on its own.
        """
        async with self._turn(org_id), self._slots:
            checker = self._idle.pop() if self._idle else await self._start()
            try:
                answer = await asyncio.wait_for(checker.ask(source), self._timeout_s)
            except TimeoutError:
                await checker.end()
                raise _refused(
                    f"it could not be checked within {self._timeout_s:g} s (the most a routine may take to "
                    "read): make it smaller, or its expressions fewer or shorter"
                ) from None
            except (EOFError, OSError, ValueError) as exc:  # it died (its memory cap) or said nonsense
                await checker.end()
                log.warning("a routine checker ended: %s (exit %s)", exc, checker.process.returncode)
                raise _refused(
                    f"it could not be checked within the {self._memory_bytes // 1024**2} MiB a routine may "
                    "take to read: make it smaller"
                ) from None
            except BaseException:  # cancelled mid-answer: the checker's pipe holds a half exchange
                checker.kill()
                raise
            self._idle.append(checker)
        if "routine" in answer:
            routine: dict[str, Any] = answer["routine"]
            return routine
        if "problems" in answer:
            lines: list[str] = answer["problems"]
            raise InvalidRequest(
                f"The routine has {len(lines)} problem(s): {lines[0]}", field="yaml", problems=lines
            )
        raise ServiceUnavailable(f"The routine checker failed: {answer.get('failed')}", retry_after_s=5)

    async def _start(self) -> _Checker:
        try:
            return await _Checker.start(self._database_url, self._memory_bytes)
        except OSError as exc:
            log.warning("a routine checker did not start: %s", exc)
            raise ServiceUnavailable(f"No routine checker could start: {exc}", retry_after_s=5) from None

    @asynccontextmanager
    async def _turn(self, org_id: str) -> AsyncIterator[None]:
        lock, users = self._turns.setdefault(org_id, (asyncio.Lock(), [0]))
        users[0] += 1
        try:
            async with lock:
                yield
        finally:
            users[0] -= 1
            if not users[0]:
                del self._turns[org_id]

    async def close(self) -> None:
        """Stop the idle checkers (a busy one ends when its pipe closes with the api)."""
        idle, self._idle = self._idle, []
        for checker in idle:
            await checker.end()


def _refused(why: str) -> InvalidRequest:
    line = f"{FILENAME}:1:1: {why}"
    return InvalidRequest(f"The routine has 1 problem(s): {line}", field="yaml", problems=[line])


def main() -> None:
    """The checker: answer each routine sent on stdin, until stdin closes."""
    from api.db import make_engine, read_session
    from api.runs.resolver import DbResolver
    from engine.validate import RoutineError, load_routine

    os.nice(NICE)
    database_url, memory_bytes = json.loads(sys.stdin.readline())
    engine = make_engine(database_url)
    try:  # CEL's parser is built on first use (~0.3 s): before the first routine's clock starts
        load_routine("name: warm\nsteps:\n  - id: a\n    uses: x.y/z/a@1\n    with: {a: '${{ 1 }}'}\n")
    except RoutineError:
        pass
    resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    for line in sys.stdin:
        try:
            source = json.loads(line)["yaml"]
            with read_session(engine) as session:
                routine = load_routine(source, FILENAME, DbResolver(session))
            answer: dict[str, Any] = {
                "routine": routine.model_dump(mode="json", by_alias=True, exclude_unset=True)
            }
        except RoutineError as exc:
            answer = {"problems": exc.lines()}
        except MemoryError:
            sys.exit(3)  # the api says the routine was too large to read
        except Exception as exc:  # a fault of the checker's own, said to the api (503), not a crash
            answer = {"failed": f"{type(exc).__name__}: {exc}"[:500]}
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()

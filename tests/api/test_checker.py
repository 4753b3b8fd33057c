"""Routines and manifests are read in checker processes (api.checker): bounded in time and memory, apart
from the api's own interpreter, each organization's one at a time."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from api.checker import _IDLE, MEMORY_BYTES, Checkers, _Checker, stop_idle
from api.db import make_engine
from api.errors import InvalidRequest
from api.migrations import migrate

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "packs"
NOOP = "com.example.tools/noop/noop@1"
_FRESH = itertools.count(1)
"""Makes each heavy routine or manifest differ from every other: a checker keeps what it has parsed."""


def small(name: str) -> str:
    return f"name: {name}\nsteps:\n  - id: a\n    uses: {NOOP}\n    with: {{n: '${{{{ 1 + 1 }}}}'}}\n"


def slow(steps: int) -> str:
    """`steps` steps of 4 different expressions of ~2,000 characters each (a list literal of 985 items),
    unlike those of any other call: the CEL parser takes 0.1-0.2 s for each, by the machine's speed (3
    steps: ~24,000 characters, within the 32,000 of a routine's expressions, and 1-2.5 s to check)."""
    body = ",".join(["1"] * 984)
    fresh = next(_FRESH)
    lines = []
    for i in range(steps):
        fields = ", ".join(f"t{k}: '${{{{ size([{fresh},{i * 4 + k},{body}]) }}}}'" for k in range(4))
        lines.append(f"  - id: s{i}\n    uses: {NOOP}\n    with: {{{fields}}}\n")
    return "name: slow\nsteps:\n" + "".join(lines)


async def refused_beside_a_quick_routine(
    checkers: Checkers, heavy_check: Awaitable[object]
) -> InvalidRequest:
    """Start two checkers (a start takes ~1 s, which a check's time does not count), then `heavy_check` of
    org_a; while it holds a checker, org_b's quick routine is read and answered first. Returns the heavy
    check's refusal."""
    for answer in await asyncio.gather(
        *(checkers.routine(org, small("warm")) for org in ("org_x", "org_y")), return_exceptions=True
    ):
        assert isinstance(answer, InvalidRequest), answer
    while len(_IDLE) < 2:  # both warm checks may have run in one checker, one after the other
        _IDLE.append(_Checker())
    heavy = asyncio.ensure_future(heavy_check)
    await asyncio.sleep(0.05)  # it has taken a checker
    quick = asyncio.ensure_future(checkers.routine("org_b", small("quick")))
    done, _ = await asyncio.wait({heavy, quick}, return_when=asyncio.FIRST_COMPLETED)
    assert quick in done  # read in the other checker, not after the heavy one
    with pytest.raises(InvalidRequest) as other:
        await quick
    assert "cannot resolve" in other.value.extra["problems"][0]
    with pytest.raises(InvalidRequest) as refused:
        await heavy
    return refused.value


async def under_what_it_takes(database: str, check: Callable[[Checkers], Awaitable[object]]) -> float:
    """60% of the CPU time a warm checker of this machine takes for `check` (a heavy routine or manifest,
    each unlike any other; two such take within ~15% of each other), in tenths of a second: a limit that
    such a check passes, whatever the machine's speed and load, and that leaves a quick check its time."""
    generous = Checkers(database, routine_s=60.0, manifest_s=60.0)
    with pytest.raises(InvalidRequest):  # a warm checker: its start is no part of a check's time
        await generous.routine("org_w", small("warm"))
    pids = [idle.process.pid for idle in _IDLE]
    before = sum(_cpu_s(pid) for pid in pids)
    with contextlib.suppress(InvalidRequest):
        await check(generous)
    return max(0.3, round((sum(_cpu_s(pid) for pid in pids) - before) * 0.6, 1))


@pytest.fixture
def database(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'b3os.db'}"
    engine = make_engine(url)
    migrate(engine)
    engine.dispose()
    return url


@pytest.fixture
def checkers(database: str) -> Checkers:
    return Checkers(database, routine_s=1.0, manifest_s=1.0)


async def test_a_routine_is_answered_as_it_is_stored_and_its_problems_at_their_lines(
    checkers: Checkers,
) -> None:
    # the registry is empty: the step's uses: does not resolve, and says so at its line
    with pytest.raises(InvalidRequest) as refused:
        await checkers.routine("org_a", small("one"))
    problems = refused.value.extra["problems"]
    assert problems[0].startswith("routine.yaml:4:11: step 'a': uses: cannot resolve " + NOOP), problems
    with pytest.raises(InvalidRequest) as refused:
        await checkers.routine("org_a", "name: bad\nsteps:\n  - id: a\n    uses: 5\n")
    assert refused.value.extra["problems"][0].startswith("routine.yaml:4:11: "), refused.value.extra


async def test_a_routine_that_takes_too_long_to_read_is_refused_and_the_next_is_read(database: str) -> None:
    limit = await under_what_it_takes(database, lambda c: c.routine("org_w", slow(3)))
    checkers = Checkers(database, routine_s=limit, manifest_s=limit)
    refused = await refused_beside_a_quick_routine(checkers, checkers.routine("org_a", slow(3)))
    assert refused.extra["problems"] == [
        f"routine.yaml:1:1: it could not be checked within {limit:g} s (the most a routine may take to "
        "read): make it smaller, or its expressions fewer or shorter"
    ]
    # its checker was stopped; a new one reads the next routine
    with pytest.raises(InvalidRequest) as again:
        await checkers.routine("org_a", small("after"))
    assert "cannot resolve" in again.value.extra["problems"][0]


async def test_an_organizations_routines_are_read_one_at_a_time(checkers: Checkers) -> None:
    order: list[str] = []

    async def check(org: str, source: str, label: str) -> None:
        with pytest.raises(InvalidRequest):
            await checkers.routine(org, source)
        order.append(label)

    # org_a's quick routine waits for its heavy one (two checkers: it would have had the other)
    await asyncio.gather(
        check("org_a", slow(3), "a heavy"),
        check("org_a", small("quick"), "a quick"),
    )
    assert order == ["a heavy", "a quick"]


async def test_a_routine_that_needs_more_memory_than_a_checker_has_is_refused(database: str) -> None:
    stop_idle()  # checkers that read routines before are larger: this one starts at ~90 MB
    checkers = Checkers(database, routine_s=60.0, manifest_s=60.0, memory_bytes=100 * 1024**2)
    items = ", ".join(f"{{k{i}: v{i}, n: {i}}}" for i in range(9_000))
    source = f"name: big\nsteps:\n  - id: a\n    uses: {NOOP}\n    foreach: [{items}]\n"
    with pytest.raises(InvalidRequest) as refused:
        await checkers.routine("org_a", source)
    assert refused.value.extra["problems"] == [
        "routine.yaml:1:1: it could not be checked within the 100 MiB a routine may take to read: "
        "make it smaller, or its expressions fewer or shorter"
    ]
    with pytest.raises(InvalidRequest) as again:  # a new checker reads the next routine
        await Checkers(database, routine_s=60.0, manifest_s=60.0).routine("org_a", small("after"))
    assert "cannot resolve" in again.value.extra["problems"][0]


def test_a_checker_whose_api_is_gone_stops_at_the_checks_time() -> None:
    # nobody waits for its answer (its api was killed): the timer of its own CPU time ends it, at half
    # the CPU time a manifest like it took this checker before (1-3 s, by the machine's speed)
    checker = _Checker()
    took = _cpu_s(checker.process.pid)
    assert checker.ask(_request(manifest_with_templates(16), 60), 120) == {"violations": []}
    took = round((_cpu_s(checker.process.pid) - took) / 2, 2)
    assert checker.process.stdin is not None and checker.process.stdout is not None
    checker.process.stdin.write(_request(manifest_with_templates(16), took))
    checker.process.stdin.flush()
    assert checker.process.wait(timeout=120) == 0
    assert json.loads(checker.process.stdout.readline()) == {"over_time": took}
    checker.end()


def test_an_idle_checker_ends_when_its_api_process_is_gone() -> None:
    # a signal ends the api without its exit handlers: its end closes the checker's stdin
    checker = _Checker()
    assert checker.process.stdin is not None
    checker.process.stdin.close()
    assert checker.process.wait(timeout=30) == 0
    checker.end()


def _request(manifest: dict[str, object], seconds: float) -> bytes:
    return json.dumps({"memory": MEMORY_BYTES, "seconds": seconds, "manifest": manifest}).encode() + b"\n"


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def test_a_checker_killed_while_it_waited_is_replaced_for_the_next_routine(checkers: Checkers) -> None:
    with pytest.raises(InvalidRequest):
        await checkers.routine("org_a", small("first"))
    for idle in list(_IDLE):  # an operator's kill, or the kernel's
        idle.process.kill()
        idle.process.wait()
    with pytest.raises(InvalidRequest) as refused:
        await checkers.routine("org_a", small("next"))
    assert "cannot resolve" in refused.value.extra["problems"][0], refused.value.extra


def manifest_with_templates(expressions: int) -> dict[str, object]:
    """The open-meteo example with `expressions` different list literals of ~2,000 characters as query
    parameters of its first action, unlike those of any other call (each 0.06-0.2 s to parse; 16, the most
    a manifest may have, 1-3 s by the machine's speed)."""
    manifest = json.loads((EXAMPLES / "open-meteo" / "b3pack.json").read_text())
    body = ",".join(["1"] * 983)
    fresh = next(_FRESH)
    query = manifest["actions"][0]["impl"]["request"]["query"]
    for i in range(expressions):
        query[f"q{i}"] = f"${{{{ size([{fresh},{i},{body}]) }}}}"
    return manifest


async def test_a_manifest_is_answered_with_its_publish_checks_violations(checkers: Checkers) -> None:
    manifest = manifest_with_templates(0)
    assert await checkers.manifest("org_a", manifest) == []
    manifest["actions"][0]["impl"]["request"]["query"]["bad"] = "${{ input.( }}"  # type: ignore[index]
    violations = await checkers.manifest("org_a", manifest)
    assert [(v.check, v.field) for v in violations] == [(32, "actions[0].impl.request.query.bad")]
    assert violations[0].message.endswith("does not parse as CEL: syntax error at line 1, column 7")


async def test_a_manifest_that_takes_too_long_to_check_is_refused_while_a_routine_is_read(
    database: str,
) -> None:
    limit = await under_what_it_takes(database, lambda c: c.manifest("org_w", manifest_with_templates(16)))
    checkers = Checkers(database, routine_s=60.0, manifest_s=limit)
    refused = await refused_beside_a_quick_routine(
        checkers, checkers.manifest("org_a", manifest_with_templates(16))
    )
    assert refused.message == (
        f"The manifest could not be checked within {limit:g} s (the most a manifest may take to check): "
        "make its request templates or its fixtures fewer, or their expressions and schemas' patterns "
        "shorter."
    )
    assert refused.extra == {"field": "manifest", "reason": "checks"}

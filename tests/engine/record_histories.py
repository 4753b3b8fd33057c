"""Record the Temporal histories of routine runs, for the replay test (tests/engine/test_history_replay.py).

Each case runs a routine on the real `RoutineWorkflow`, with the stand-in `call_action` activity
(tests/engine/standin.py), on Temporal's time-skipping test server, and its history is written as
`tests/engine/histories/<release>/<case>.json` (`WorkflowHistory.to_json()`). A release's histories
are recorded once, with the workflow code of that release, and then kept: the replay test replays
every one of them against the current workflow, so a change that would break a run in flight (one
started by the older worker) fails `make test`.

Re-record after a release (docs/internals.md, "Upgrading workers"):

    .venv/bin/python tests/engine/record_histories.py --release v2          # every case
    .venv/bin/python tests/engine/record_histories.py --release v2 parallel  # one case

Cases whose routine uses what an older release cannot run are marked with the first release that
has it (`since`), and are recorded only for that release and later ones.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from standin import REFUSED_AS_CANCELLED, REPO, run_routine
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment

HISTORIES = Path(__file__).resolve().parent / "histories"
RELEASES = ("v1", "v2", "v3", "v4", "v5", "v6", "v7", "v8")
"""Releases in order: v1 ran steps one after another; v2 added needs:, max-parallel and status functions;
v3 added re-runs (steps kept from the run re-run, RunRoutineInput.reused); v4 spreads a run's expression
work over workflow tasks (engine/pacing.py); v5 fails an expression whose result holds an integer
beyond 2^53 - 1 (engine/pacing.py, PATCH_EXACT_INTEGERS); v6 pauses after 1,000 units of expression work
instead of 4,000 (PATCH_SHORT_TASKS); v7 counts evaluation steps and values read at what they cost
(PATCH_STEP_COST); v8 marks a step the api refused as its run was cancelled `cancelled`
(PATCH_CANCEL_REFUSED), and runs a foreach of more than 1,000 items in child workflows (engine/foreach.py)."""

ECHO = "com.example.tools/echo/echo@1"
FAIL = "com.example.tools/echo/fail@1"


STEP_HEAVY_FOREACH = f"""\
name: paced-steps
inputs:
  items: {{type: array}}
  xs: {{type: array}}
steps:
  - id: each
    uses: {ECHO}
    foreach: ${{{{ inputs.items }}}}
    with: {{text: "${{{{ string(inputs.xs.filter(x, x >= item).size()) }}}}"}}
"""
"""A foreach whose items each filter `inputs.xs`: evaluation steps, not characters, make its work."""


@dataclass(frozen=True)
class Case:
    """One recorded run: a routine (YAML text, or `examples/routines/<file>` for `example.yaml`), its
    inputs, and how it ends."""

    name: str
    source: str
    inputs: dict[str, Any] = field(default_factory=dict)
    cancel_when_sleeping: str | None = None  # cancel the run once this step's sleep runs
    since: str = "v1"
    upto: str | None = None  # the last release that records it (None: every release since `since`)
    reused: dict[str, Any] = field(default_factory=dict)  # a re-run's kept steps (StepResult dicts)

    def text(self) -> str:
        """The routine's YAML text."""
        if "\n" not in self.source:
            return (REPO / "examples" / "routines" / self.source).read_text(encoding="utf-8")
        return self.source


CASES = [
    Case("hello", "hello.yaml"),
    Case("conditional", "conditional.yaml", {"detailed": True}),
    Case("conditional-skipped", "conditional.yaml"),
    Case("fan-out", "fan-out.yaml", {"members": ["ann", "bo", "cy", "di", "ed", "flo"]}),
    Case("places", "places.yaml"),
    Case("places-nowhere", "places.yaml", {"place": "Nowhere"}),
    Case("resilient-retried", "resilient.yaml"),
    Case(
        "step-failed",
        f"""\
name: step-failed
steps:
  - id: first
    uses: {ECHO}
    with: {{text: one}}
  - id: fail
    uses: {FAIL}
    with: {{mode: tool_error, code: no_way, message: this will never work}}
  - id: never
    uses: {ECHO}
    with: {{text: never}}
""",
    ),
    Case(
        "foreach-item-failed",
        f"""\
name: foreach-item-failed
steps:
  - id: each
    uses: {ECHO}
    foreach: [a, 5, c]
    continue-on-error: true
    with: {{text: "${{{{ item }}}}"}}
  - id: after
    uses: {ECHO}
    with: {{text: "${{{{ steps.each.status }}}}"}}
outputs:
  status: ${{{{ steps.each.status }}}}
""",
    ),
    Case(
        "cancelled",
        f"""\
name: cancelled
steps:
  - id: first
    uses: {ECHO}
    with: {{text: one}}
  - id: slow
    uses: {FAIL}
    with: {{mode: sleep, seconds: 100}}
  - id: never
    uses: {ECHO}
    with: {{text: never}}
""",
        cancel_when_sleeping="slow",
    ),
    Case("fan-in", "fan-in.yaml", since="v2"),
    Case("cleanup", "cleanup.yaml", {"fail": True}, since="v2"),
    Case(
        "cleanup-after-cancel",
        f"""\
name: cleanup-after-cancel
max-parallel: 2
steps:
  - id: slow
    uses: {FAIL}
    with: {{mode: sleep, seconds: 100}}
  - id: other
    needs: []
    uses: {ECHO}
    with: {{text: other}}
  - id: never
    uses: {ECHO}
    with: {{text: never}}
  - id: cleanup
    needs: [slow]
    if: ${{{{ always() }}}}
    uses: {ECHO}
    with: {{text: "cleaned after ${{{{ steps.slow.status }}}}"}}
  - id: report
    needs: [cleanup]
    if: ${{{{ cancelled() }}}}
    uses: {ECHO}
    with: {{text: cancelled}}
""",
        cancel_when_sleeping="slow",
        since="v2",
        # v8's recording hangs on the time-skipping test server: the SDK's core fails each workflow task
        # after the cancel ("ActivityMachine in state ScheduledActivityCancelCommandCreated says the
        # transition is invalid during event ActivityTaskCanceled"), with v7's workflow code as well; the
        # dev server runs it (tests/engine/test_run_grants.py's cleanup after a cancel), and v2-v7's
        # recordings of it replay on every later release
        upto="v7",
    ),
    Case(
        "rerun",
        f"""\
name: rerun
steps:
  - id: first
    uses: {ECHO}
    with: {{text: one}}
  - id: other
    needs: []
    if: false
    uses: {ECHO}
    with: {{text: never}}
  - id: then
    needs: [first, other]
    uses: {ECHO}
    with: {{text: "${{{{ steps.first.output.text }}}} again"}}
outputs:
  text: ${{{{ steps.then.output.text }}}}
""",
        reused={
            "first": {"status": "succeeded", "attempts": 1, "ref": f"{ECHO}.0.0", "output": {"text": "kept"}},
            "other": {"status": "skipped"},
        },
        since="v3",
    ),
    Case(
        "paced",
        "name: paced\nmax-parallel: 6\nsteps:\n"
        + "".join(
            f"  - id: s{i}\n    uses: {ECHO}\n    needs: []\n"
            f"    with: {{text: '${{{{ [{','.join(['1'] * 850)}].size() }}}}'}}\n"
            for i in range(6)
        ),
        since="v4",
    ),
    Case(
        "paced-steps",
        STEP_HEAVY_FOREACH,
        inputs={"items": list(range(8)), "xs": list(range(300))},
        since="v6",  # recorded by v6 too: v7 pauses where v6 did not
    ),
    Case(
        "refused-as-cancelled",
        f"name: refused-as-cancelled\nsteps:\n  - id: a\n    uses: {ECHO}\n"
        f"    with: {{text: '{REFUSED_AS_CANCELLED}'}}\n"
        f"  - id: b\n    uses: {ECHO}\n    with: {{text: after}}\n",
        since="v8",
    ),
    Case(
        "foreach-chunks",
        f"""\
name: foreach-chunks
inputs:
  items: {{type: array}}
steps:
  - id: first
    uses: {ECHO}
    with: {{text: one}}
  - id: each
    uses: {ECHO}
    foreach: ${{{{ inputs.items }}}}
    with: {{text: "${{{{ steps.first.output.text }}}} ${{{{ string(item) }}}}"}}
outputs:
  last: ${{{{ steps.each.output[1000].text }}}}
""",
        inputs={"items": list(range(1_001))},
        since="v8",
    ),
    Case(
        "big-integer",
        f"name: big-integer\nsteps:\n  - id: a\n    uses: {ECHO}\n"
        "    with: {text: '${{ 9007199254740991 + 1 }}'}\n",
        since="v5",
    ),
]


def cases_of(release: str) -> list[Case]:
    """The cases a release records: those whose routine it can run."""
    at = RELEASES.index(release)
    return [
        c for c in CASES if RELEASES.index(c.since) <= at and (c.upto is None or at <= RELEASES.index(c.upto))
    ]


async def record(release: str, names: list[str] | None = None, *, force: bool = False) -> list[Path]:
    """Record the cases of a release (all, or those named) under histories/<release>/; the files written."""
    chosen = [c for c in cases_of(release) if not names or c.name in names]
    unknown = set(names or ()) - {c.name for c in chosen}
    if unknown:
        raise SystemExit(f"no case {', '.join(sorted(unknown))} in release {release}")
    binary = shutil.which("temporal-test-server") or str(Path(sys.executable).parent / "temporal-test-server")
    out = HISTORIES / release
    if release != RELEASES[-1] and not force:
        raise SystemExit(
            f"{release} is an older release: its histories are what its workers wrote (--force to overwrite)"
        )
    out.mkdir(parents=True, exist_ok=True)
    written = []
    env = await WorkflowEnvironment.start_time_skipping(
        test_server_existing_path=binary, data_converter=pydantic_data_converter
    )
    try:
        for case in chosen:
            run = await run_routine(
                env.client,
                case.text(),
                case.inputs,
                run_id=f"history-{case.name}",
                cancel_when_sleeping=case.cancel_when_sleeping,
                reused=case.reused,
            )
            history = run.history
            path = out / f"{case.name}.json"
            path.write_text(history.to_json() + "\n", encoding="utf-8")
            written.append(path)
    finally:
        await env.shutdown()
    return written


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--release", required=True, choices=RELEASES)
    parser.add_argument("cases", nargs="*", help="case names (all of the release's cases by default)")
    parser.add_argument("--force", action="store_true", help="overwrite an older release's histories")
    args = parser.parse_args()
    for path in asyncio.run(record(args.release, args.cases, force=args.force)):
        sys.stdout.write(f"{path.relative_to(REPO)}\n")


if __name__ == "__main__":
    main()

"""Routine test results as a person reads them (`text`) and as JUnit XML for CI (`junit_xml`).

The JUnit document has one `<testsuite>` per test file (named by the routine file) and one `<testcase>`
per case (`classname` the routine file, `name` the case's name); a case that did not pass has one
`<failure>` whose message is its first difference and whose text lists them all, and a test file that
could not run has one `<testcase name="(the test file)">` with an `<error>` of its problems.
"""

from __future__ import annotations

from xml.etree import ElementTree

from engine.offline.runner import CaseResult, FileResult


def text(results: list[FileResult]) -> str:
    """Each file, each case with a mark (✓ passed, ✗ failed), the differences of those that failed, and
    a last line of counts."""
    lines: list[str] = []
    for file in results:
        lines.append(f"{file.test_file} ({file.routine.name})")
        for problem in file.problems:
            lines.append(f"  ✗ cannot run: {problem}")
        for case in file.cases:
            lines.append(f"  {'✓' if case.passed else '✗'} {case.name}")
            if not case.passed:
                lines.extend(f"      {d}" for d in case.differences)
                lines.extend(f"      {s}" for s in _steps(case))
    cases = [c for f in results for c in f.cases]
    failed = sum(not c.passed for c in cases)
    broken = sum(bool(f.problems) for f in results)
    summary = f"{len(cases)} case(s): {len(cases) - failed} passed, {failed} failed"
    if broken:
        summary += f"; {broken} test file(s) could not run"
    lines.append(summary)
    return "\n".join(lines) + "\n"


def _steps(case: CaseResult) -> list[str]:
    """The run's steps, for a case that failed, each with its error's code and what answered its calls:
    `(the run ended failed; steps: search succeeded [examples/packs/open-meteo/fixtures/search-berlin.json],
    say failed (no_fixture))`."""
    parts = []
    for step_id, step in case.steps.items():
        part = f"{step_id} {step['status']}"
        if step.get("error"):
            part += f" ({step['error']['code']})"
        sources = sorted(set(case.answered_by.get(step_id, {}).values()))
        if sources:
            part += f" [{', '.join(sources)}]"
        parts.append(part)
    return [f"(the run ended {case.status}; steps: {', '.join(parts)})"]


def junit_xml(results: list[FileResult]) -> str:
    """The results as a JUnit XML document (UTF-8 text with its declaration)."""
    root = ElementTree.Element("testsuites", name="b3os routine test")
    total = failures = errors = 0
    seconds = 0.0
    for file in results:
        suite = ElementTree.SubElement(root, "testsuite", name=str(file.routine))
        suite_failures = sum(not c.passed for c in file.cases)
        suite_seconds = sum(c.seconds for c in file.cases)
        count = len(file.cases) + (1 if file.problems else 0)
        suite.set("tests", str(count))
        suite.set("failures", str(suite_failures))
        suite.set("errors", "1" if file.problems else "0")
        suite.set("time", f"{suite_seconds:.3f}")
        if file.problems:
            case = ElementTree.SubElement(
                suite, "testcase", classname=str(file.routine), name=str(file.test_file)
            )
            error = ElementTree.SubElement(case, "error", message=file.problems[0])
            error.text = "\n".join(file.problems)
        for result in file.cases:
            case = ElementTree.SubElement(
                suite, "testcase", classname=str(file.routine), name=result.name, time=f"{result.seconds:.3f}"
            )
            if not result.passed:
                failure = ElementTree.SubElement(case, "failure", message=result.differences[0])
                failure.text = "\n".join(result.differences + _steps(result))
        total += count
        failures += suite_failures
        errors += 1 if file.problems else 0
        seconds += suite_seconds
    root.set("tests", str(total))
    root.set("failures", str(failures))
    root.set("errors", str(errors))
    root.set("time", f"{seconds:.3f}")
    ElementTree.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ElementTree.tostring(root, encoding="unicode") + "\n"

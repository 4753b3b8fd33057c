"""Routines tested offline (`b3os routine test`): the real workflow on Temporal's time-skipping test server,
each step's call answered from fixtures (docs/routines.md, "Testing routines").

    cases.py    the test file (`<routine>.test.yaml`): its model, read with line numbers
    packs.py    the local packs a routine's `uses:` resolve in, and their fixtures
    book.py     one case's answers, and the calls its run made (filled by the step activity)
    expect.py   a finished case's run held against its expectations: one sentence per difference
    runner.py   the test server, the worker and each case's run
    report.py   the results as a person reads them, and as JUnit XML

The step activity that answers from fixtures is activities/fixture_call.py.
"""

"""The routine the SDKs' tests store and run, under a name of each test's own."""

from __future__ import annotations

from realstack import FREE_ECHO


def greet(name: str) -> str:
    """Three steps: `greet` says hello to `inputs.who`, `twice` repeats it with a `!` (the output `said`), and
    `loud` runs only for "nobody" (skipped otherwise)."""
    return f"""\
name: {name}
inputs:
  who: {{type: string}}
steps:
  - id: greet
    uses: {FREE_ECHO}
    with: {{text: "hello ${{{{ inputs.who }}}}"}}
  - id: twice
    uses: {FREE_ECHO}
    with: {{text: "${{{{ steps.greet.output.text }}}}!"}}
  - id: loud
    uses: {FREE_ECHO}
    if: ${{{{ inputs.who == "nobody" }}}}
    with: {{text: HELLO}}
outputs:
  said: ${{{{ steps.twice.output.text }}}}
"""

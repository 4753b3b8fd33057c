"""Print the JSON Schema (draft 2020-12) of the routine format, for editors and checks.

Point an editor at it with the modeline `# yaml-language-server: $schema=<path>` in a routine file;
the repository keeps a copy at docs/routine.schema.json.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-o", "--output", metavar="FILE", help="write the schema to FILE instead of stdout")


def run(args: argparse.Namespace) -> int:
    from engine.schema import routine_json_schema_text

    text = routine_json_schema_text()
    if args.output:
        try:
            Path(args.output).write_text(text, encoding="utf-8")
        except OSError as exc:
            print(f"b3os routine schema: cannot write {args.output}: {exc.strerror or exc}", file=sys.stderr)
            return 1
        return 0
    sys.stdout.write(text)
    return 0

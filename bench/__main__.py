"""Run the benches: `python -m bench` runs every bench/*.py module that has a `main`; `python -m bench NAME
[ARGS]` runs one."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    here = Path(__file__).resolve().parent
    names = [p.stem for p in sorted(here.glob("*.py")) if not p.stem.startswith("_")]
    if argv and argv[0] in names:
        return int(importlib.import_module(f"bench.{argv[0]}").main(argv[1:]) or 0)
    status = 0
    for name in names:
        module = importlib.import_module(f"bench.{name}")
        if hasattr(module, "main"):  # the others are parts of the benches (burst, routinestack, ...)
            print(f"== bench {name}")
            status |= int(module.main([]) or 0)
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

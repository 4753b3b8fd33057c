"""The flags of every command that talks to the api (`cli._http.ApiConfig.load` reads them).

Light on imports: the parser of every command is built for `b3os --help`.
"""

from __future__ import annotations

import argparse


def add_api_arguments(parser: argparse.ArgumentParser) -> None:
    """`--api-url` and `--api-key`, each None when not given."""
    parser.add_argument("--api-url", default=None, help="the api (default $B3OS_API_URL or .b3os/dev.env)")
    parser.add_argument("--api-key", default=None, help="the key (default $B3OS_API_KEY or .b3os/dev.env)")

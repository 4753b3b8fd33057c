"""Call an action: print its output and write its output files.

REF is `ns/pack/action@1` (the newest 1.x.y) or `@1.0.0` (exact). --input is the input as JSON (or
@FILE to read it from a file); each --file FIELD=PATH sets a file field to that file's bytes, named
after the file. The output properties the action declares as files (`x-b3os-file`) are written to the
current directory (or --out-dir) under the plain name the tool gave them, never over an existing file
unless --force, and the printed output shows where; nothing else the tool printed becomes a file. On
429 and 503 the call is sent again after exactly the answer's Retry-After with the same Idempotency-Key
(--idempotency-key, else one made for this call), a bounded number of times, saying so on stderr. The
key comes from --api-key, B3OS_API_KEY or .b3os/dev.env.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import re
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from b3os import B3OS, APIError, B3OSError, Retry
from cli._args import add_api_arguments
from cli._http import ApiConfig, CliError, connect, sentence
from node.answers import clean_message

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("ref", metavar="REF", help="the action, such as com.example.tools/echo/echo@1")
    parser.add_argument("--input", default="{}", help="the input as a JSON object, or @FILE (default {})")
    parser.add_argument(
        "--file",
        action="append",
        default=[],
        metavar="FIELD=PATH",
        help="set file field FIELD to the bytes of PATH (repeatable)",
    )
    parser.add_argument(
        "--idempotency-key", default=None, help="send this Idempotency-Key (retries reuse it)"
    )
    parser.add_argument("--timeout-ms", type=int, default=None, help="the call's time limit in milliseconds")
    parser.add_argument("--out-dir", type=Path, default=Path("."), help="where output files go (default .)")
    parser.add_argument("--force", action="store_true", help="replace files of the same name in --out-dir")
    parser.add_argument("--max-retries", type=int, default=5, help="retries on 429/503 (default 5)")
    parser.add_argument(
        "--max-wait", type=float, default=300.0, help="longest Retry-After to wait, in seconds"
    )
    add_api_arguments(parser)


def build_input(text: str) -> dict[str, Any]:
    """The call's input from --input (JSON, or @FILE).

    Raises:
        CliError: the JSON or its file is not usable (the sentence says which).
    """
    if text.startswith("@"):
        try:
            text = Path(text[1:]).read_text()
        except OSError as exc:
            raise CliError(f"--input {text}: cannot read it ({exc.strerror})") from None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise CliError(f"--input is not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise CliError(f"--input must be a JSON object, not {type(value).__name__}")
    return value


def read_files(specs: list[str]) -> dict[str, tuple[str, bytes]]:
    """The file fields of --file FIELD=PATH: each field's file name and bytes.

    Raises:
        CliError: a spec, a file name or a file is not usable (the sentence says which).
    """
    files: dict[str, tuple[str, bytes]] = {}
    for spec in specs:
        field, sep, path = spec.partition("=")
        if not sep or not field or not path:
            raise CliError(f"--file {spec!r} is not FIELD=PATH")
        name = Path(path).name
        if not NAME.match(name):
            raise CliError(
                f"--file {spec}: the file name {name!r} must match {NAME.pattern}; rename the file"
            )
        try:
            files[field] = (name, Path(path).read_bytes())
        except OSError as exc:
            raise CliError(f"--file {spec}: cannot read {path} ({exc.strerror})") from None
    return files


def _is_file(value: Any) -> bool:
    return isinstance(value, dict) and "$bytes" in value


def declared_files(client: B3OS, answer: dict[str, Any]) -> set[str]:
    """The output properties the called action's output schema declares as files (`x-b3os-file`), read
    from the registry only when the output holds a file value at all."""
    output = answer.get("output")
    if not isinstance(output, dict) or not any(_is_file(v) for v in output.values()):
        return set()
    try:
        action = client.actions.resolve(str(answer.get("ref"))).get("action") or {}
    except B3OSError as exc:
        ref = answer.get("ref")
        raise CliError(f"cannot read which outputs of {ref} are files: {sentence(exc)}") from exc
    props = (action.get("outputSchema") or {}).get("properties") or {}
    return {name for name, prop in props.items() if isinstance(prop, dict) and "x-b3os-file" in prop}


def write_files(output: Any, out_dir: Path, declared: set[str], *, force: bool = False) -> Any:
    """Write each declared output file to `out_dir`, under the plain name the tool gave it, and show it in
    the output as its name, size, type and path. A file value in a property that is not declared as a
    file is shown as it came and never written. Every file is checked before any is written: a name that
    is not plain, two files of one name, or (without `force`) a name that exists in `out_dir` writes
    nothing. With `force` an existing file is replaced (a symlink there is replaced, never followed).

    Raises:
        CliError: the sentence says which file and why; nothing was written.
    """
    if not isinstance(output, dict):
        return output
    chosen = {field: value for field, value in output.items() if field in declared and _is_file(value)}
    targets: dict[str, Path] = {}
    for field, value in chosen.items():
        name = value.get("name")
        if not isinstance(name, str) or not NAME.match(name):
            shown = clean_message(str(name))[:80]
            why = f"the file name {shown!r} is not a plain file name"
            raise CliError(f"output.{field}: {why}; nothing written")
        target = out_dir / name
        if target in targets.values():
            raise CliError(f"output.{field}: another output file is also named {name}; nothing written")
        if not force and os.path.lexists(target):
            raise CliError(f"{target} exists; nothing written (--force replaces it)")
        targets[field] = target
    shown_output = dict(output)
    for field, target in targets.items():
        value = chosen[field]
        try:
            data = base64.b64decode(value["$bytes"], validate=True)
        except (ValueError, TypeError):
            raise CliError(f"output.{field}: its bytes are not base64; nothing more written") from None
        _write(target, data, force=force)
        shown_output[field] = {k: v for k, v in value.items() if k != "$bytes"} | {"path": str(target)}
    return shown_output


def _write(target: Path, data: bytes, *, force: bool) -> None:
    """Write a new file (or, with `force`, replace whatever is there by renaming a new one over it)."""
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        if not force:
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
            return
        fd, temp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
            os.chmod(temp, 0o644)
            os.replace(temp, target)
        except BaseException:
            Path(temp).unlink(missing_ok=True)
            raise
    except FileExistsError:
        raise CliError(f"{target} exists; nothing more written (--force replaces it)") from None
    except OSError as exc:
        raise CliError(f"cannot write {target} ({exc.strerror})") from None


def call_with_retries(
    client: B3OS,
    body: dict[str, Any],
    *,
    key: str | None,
    max_retries: int,
    max_wait: float,
    say: Callable[[str], None],
    sleep: Callable[[float], Any] = time.sleep,
    files: dict[str, tuple[str, bytes]] | None = None,
) -> dict[str, Any]:
    """Send the call through the SDK, which waits exactly Retry-After on 429/503 and sends it again with
    the same Idempotency-Key (bounded), saying so on stderr before each wait.

    Args:
        client: The SDK client.
        body: `{"ref", "input", "timeout_ms"?}`.
        key: The Idempotency-Key (default: one the SDK makes for this call).
        max_retries: How many times to send it again.
        max_wait: The longest Retry-After to wait, in seconds.
        say: Where the retry lines go.
        sleep: How to wait.
        files: File fields to add to the input: name and bytes each.

    Raises:
        CliError: the call's error sentence once retries are spent or the error is not one to retry.
    """

    def tell(retry: Retry) -> None:
        say(
            f"b3os call: {sentence(retry.error)}; retrying in {retry.wait_s:g} s "
            f"(retry {retry.attempt} of {retry.max_retries})"
        )

    sdk = client.with_options(max_retries=max_retries, max_retry_wait_s=max_wait, on_retry=tell, sleep=sleep)
    try:
        return sdk.actions.call(
            body["ref"],
            body.get("input"),
            files=files,
            idempotency_key=key,
            timeout_ms=body.get("timeout_ms"),
        )
    except APIError as exc:
        wait = exc.retry_after
        if exc.status in (429, 503) and wait is not None and wait > max_wait and max_retries > 0:
            raise CliError(f"{sentence(exc)}; Retry-After is {wait:g} s, more than --max-wait") from exc
        raise CliError(sentence(exc)) from exc
    except B3OSError as exc:
        raise CliError(sentence(exc)) from exc


def run(args: argparse.Namespace) -> int:
    def say(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    try:
        body: dict[str, Any] = {"ref": args.ref, "input": build_input(args.input)}
        if args.timeout_ms is not None:
            body["timeout_ms"] = args.timeout_ms
        files = read_files(args.file)
        with connect(ApiConfig.load(url=args.api_url, key=args.api_key)) as client:
            answer = call_with_retries(
                client,
                body,
                key=args.idempotency_key,
                max_retries=max(0, args.max_retries),
                max_wait=max(0.0, args.max_wait),
                say=say,
                files=files,
            )
            declared = declared_files(client, answer)
        output = write_files(answer.get("output"), args.out_dir, declared, force=args.force)
    except CliError as exc:
        print(f"b3os call: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(output, indent=2))
    cost = answer.get("cost") or {}
    say(
        f"{answer.get('call_id')} {answer.get('ref')}: {cost.get('total', 0)} micro-USD (compute "
        f"{cost.get('compute', 0)}, floor {cost.get('floor', 0)}, price {cost.get('price', 0)})"
    )
    return 0

"""The SDK stands alone: `pip install sdk/python` into a fresh virtualenv brings the SDK, httpx and httpx's
own dependencies, nothing of the platform, and that virtualenv's Python calls the real stack with it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from realstack import RoutineStack

SDK = Path(__file__).resolve().parents[2] / "sdk" / "python"
ECHO = "com.example.tools/echo/echo@1"
PLATFORM = {"b3os-platform", "temporalio", "fastapi", "pydantic", "sqlmodel", "uvicorn", "httptools", "mcp"}

# Run by the fresh virtualenv's Python: each distribution it has and what each requires.
LIST_DISTRIBUTIONS = """\
import importlib.metadata, json
print(json.dumps({d.metadata["Name"]: d.requires or [] for d in importlib.metadata.distributions()}))
"""

# Run by the fresh virtualenv's Python against the stack: a tool call's answer and a typed error.
CALL = f"""\
import b3os
from b3os import B3OS, NotFound
print(b3os.__file__)
with B3OS() as client:
    answer = client.actions.call({ECHO!r}, {{"text": "alone"}})
    print(answer["ref"], answer["output"]["text"])
    try:
        client.actions.resolve("com.example.tools/echo/nowhere@1")
    except NotFound as exc:
        print(exc.status, exc.code, exc.body["missing"])
"""


@pytest.fixture(scope="module")
def sdk_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The Python of a fresh virtualenv (no pip, no setuptools) into which pip installed sdk/python."""
    venv = tmp_path_factory.mktemp("sdk-alone") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=60)
    python = venv / "bin" / "python"
    pip = [sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet", str(SDK)]
    done = subprocess.run(pip, capture_output=True, text=True, timeout=100)
    assert done.returncode == 0, done.stderr[-3000:]
    return python


def _closure(requires: dict[str, list[str]], root: str) -> set[str]:
    """`root` and every distribution it requires, directly or not (extras left out)."""
    seen: set[str] = set()
    todo = [root]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        for line in requires[name]:
            req = Requirement(line)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(canonicalize_name(req.name))
    return seen


@pytest.mark.timeout(240)
def test_pip_install_of_sdk_python_brings_httpx_and_its_dependencies_only(sdk_python: Path) -> None:
    done = subprocess.run(
        [str(sdk_python), "-I", "-c", LIST_DISTRIBUTIONS],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    requires = {canonicalize_name(name): reqs for name, reqs in json.loads(done.stdout).items()}
    assert [Requirement(r).name for r in requires["b3os"]] == ["httpx"]
    assert set(requires) == _closure(requires, "b3os")  # the SDK, httpx and what httpx needs: nothing else
    assert {"httpx", "httpcore", "h11", "idna", "certifi"} <= set(requires)
    assert not PLATFORM & set(requires)
    assert not (SDK / "build").exists() and not list(SDK.glob("*.egg-info"))  # nothing written beside it


@pytest.mark.timeout(240)
def test_the_sdk_installed_alone_calls_the_real_api(
    sdk_python: Path, stack: RoutineStack, tmp_path: Path
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("B3OS_", "PYTHON"))}
    env.update(B3OS_API_URL=stack.url, B3OS_API_KEY=stack.org().key)
    done = subprocess.run(
        [str(sdk_python), "-I", "-c", CALL], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr[-3000:]
    where, called, missing = done.stdout.splitlines()
    assert Path(where).is_relative_to(sdk_python.parents[1])  # the installed copy, not this checkout's
    assert called == "com.example.tools/echo/echo@1.0.0 alone"
    assert missing == "404 not_found action"

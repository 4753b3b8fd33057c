"""The TypeScript SDK (`sdk/typescript`, `@b3os/sdk`) for the tests: built once when it is absent or older
than its sources, its OpenAPI document as the server makes it, and TypeScript programs compiled against it
and run with node.

`python -m tests.sdk.typescript_sdk` writes `sdk/typescript/openapi.json` from the app (`make sdk-types`
then regenerates `src/schema.ts` from it).
"""

from __future__ import annotations

import fcntl
import json
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SDK = REPO / "sdk" / "typescript"
BUILD_S = 600  # npm ci on a cold cache, then tsc on a loaded machine


def openapi_text() -> str:
    """The api's OpenAPI document as `sdk/typescript/openapi.json` holds it."""
    from api.config import Settings
    from api.main import create_app

    with tempfile.TemporaryDirectory() as data_dir:
        app = create_app(Settings(data_dir=Path(data_dir)))
        try:
            document = app.openapi()
        finally:
            app.state.engine.dispose()
    return json.dumps(document, indent=2, ensure_ascii=False) + "\n"


def _newest(*paths: Path) -> float:
    files = [f for p in paths for f in ([p] if p.is_file() else p.rglob("*")) if f.is_file()]
    return max(f.stat().st_mtime for f in files)


def install() -> Path:
    """`npm ci` when node_modules is absent or older than the lock file. Returns the SDK's folder."""
    with _held():
        installed = SDK / "node_modules" / ".package-lock.json"
        if not installed.exists() or installed.stat().st_mtime < _newest(SDK / "package-lock.json"):
            _npm("ci", "--no-audit", "--no-fund")
    return SDK


def build() -> Path:
    """`install()`, then `npm run build` when dist is absent or older than the sources. Returns the SDK's
    folder."""
    install()
    with _held():
        built = SDK / "dist" / "index.js"
        sources = (SDK / "src", SDK / "test", SDK / "tsconfig.json", SDK / "package.json")
        if not built.exists() or built.stat().st_mtime < _newest(*sources):
            _npm("run", "build")
    return SDK


@contextmanager
def _held() -> Iterator[None]:
    """One process at a time installs or builds (xdist workers share the checkout): a lock on package.json."""
    with (SDK / "package.json").open("rb") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        yield


def _npm(*argv: str) -> None:
    done = subprocess.run(["npm", *argv], cwd=SDK, capture_output=True, text=True, timeout=BUILD_S)
    assert done.returncode == 0, f"npm {' '.join(argv)} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"


TSCONFIG = {
    "compilerOptions": {
        "target": "ES2022",
        "lib": ["ES2022"],
        "types": ["node"],
        "module": "NodeNext",
        "moduleResolution": "NodeNext",
        "strict": True,
        "skipLibCheck": True,
    },
    "files": ["main.ts"],
}


def run_typescript(
    source: str | Path, folder: Path, env: Mapping[str, str]
) -> subprocess.CompletedProcess[str]:
    """Compile `source` (a text, or a file's) as `main.ts` of a new program in `folder` that depends on
    `@b3os/sdk` (the built SDK), as a user's would, and run it with node; returns the run (a compile error
    fails here)."""
    modules = folder / "node_modules"
    (modules / "@b3os").mkdir(parents=True)
    (modules / "@b3os" / "sdk").symlink_to(SDK, target_is_directory=True)
    (modules / "@types").symlink_to(SDK / "node_modules" / "@types", target_is_directory=True)
    (folder / "package.json").write_text('{"type": "module", "private": true}\n')
    (folder / "tsconfig.json").write_text(json.dumps(TSCONFIG))
    (folder / "main.ts").write_text(source.read_text() if isinstance(source, Path) else source)
    tsc = [SDK / "node_modules" / ".bin" / "tsc", "-p", folder]
    compiled = subprocess.run(tsc, cwd=folder, capture_output=True, text=True, timeout=120)
    assert compiled.returncode == 0, f"tsc:\n{compiled.stdout}{compiled.stderr}"
    return subprocess.run(
        ["node", "main.js"], cwd=folder, env=dict(env), capture_output=True, text=True, timeout=120
    )


if __name__ == "__main__":
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else SDK / "openapi.json"
    target.write_text(openapi_text())

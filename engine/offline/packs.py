"""The local packs a tested routine's `uses:` resolve in, with their fixtures.

`--packs DIR` (repeatable) names a pack directory (holding `b3pack.json`) or a directory of them (each
subdirectory holding one); without it, `examples/packs` and `examples/tools` of the current directory
(those that exist). Refs resolve by the one rule of `packs.resolve` (engine.resolvers.LocalPackResolver),
and each pack's fixtures must pass publish check 41 before a test may use them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.errors import EngineError
from engine.resolvers import LocalPackResolver, ResolveError
from packs.errors import ManifestError
from packs.fixtures import PackFixtures, fixture_problems
from packs.loader import MANIFEST_NAME, load_pack
from packs.refs import ActionRef

DEFAULT_PACK_PATHS = ("examples/packs", "examples/tools")


class PacksError(EngineError):
    """The local packs cannot be used: the sentences say which directory or fixture and why."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("\n".join(problems))


@dataclass(frozen=True)
class LocalPack:
    """One pack version on disk: its directory, its actions by key and its fixtures."""

    root: Path
    manifest: Mapping[str, Any]
    actions: Mapping[str, Mapping[str, Any]]
    fixtures: PackFixtures


class LocalPacks:
    """Pack directories by pack and version, and the resolver of refs over them."""

    def __init__(self, directories: list[Path]) -> None:
        """Load each pack directory and its fixtures.

        Raises:
            PacksError: a directory is not a pack, or a pack's fixtures fail check 41.
        """
        self.directories = directories
        self._packs: dict[tuple[str, str], LocalPack] = {}
        problems: list[str] = []
        for root in directories:
            try:
                pack = load_pack(root)
                files = pack.other_files()
            except (ManifestError, OSError) as exc:
                problems.append(f"{root}: {exc}")
                continue
            refused = fixture_problems(pack.manifest, files)
            if refused:
                problems.extend(f"{root}: {v.message}" for v in refused)
                continue
            actions = {
                a["key"]: a for a in pack.manifest.get("actions", []) if isinstance(a, dict) and "key" in a
            }
            key = (str(pack.manifest.get("pack")), str(pack.manifest.get("version")))
            self._packs[key] = LocalPack(root, pack.manifest, actions, PackFixtures.of_files(files))
        if problems:
            raise PacksError(problems)
        try:
            self.resolver = LocalPackResolver(directories)
        except ResolveError as exc:
            raise PacksError([str(exc)]) from None

    def action(self, pin: str) -> tuple[LocalPack, Mapping[str, Any]] | None:
        """The pack and the action an exact pin (`ns/pack/action@1.0.0`) names, or None."""
        try:
            ref = ActionRef.parse(pin)
        except ValueError:
            return None
        pack = self._packs.get((ref.pack, ref.version))
        if pack is None or ref.action not in pack.actions:
            return None
        return pack, pack.actions[ref.action]


def pack_directories(paths: Iterable[str | Path], *, cwd: Path | None = None) -> list[Path]:
    """The pack directories `--packs` names (each a pack, or a directory of packs); the defaults without any.

    Raises:
        PacksError: a path is not there or holds no pack, or no default directory is there.
    """
    given = [Path(p) for p in paths]
    base = cwd or Path()
    chosen = given or [base / p for p in DEFAULT_PACK_PATHS if (base / p).is_dir()]
    if not chosen:
        raise PacksError(
            [
                f"no pack directory: give --packs DIR (the defaults, {' and '.join(DEFAULT_PACK_PATHS)}, "
                f"are not in {base.resolve()})"
            ]
        )
    found: list[Path] = []
    for path in chosen:
        if (path / MANIFEST_NAME).is_file():
            found.append(path)
            continue
        inner = sorted(p for p in path.iterdir() if (p / MANIFEST_NAME).is_file()) if path.is_dir() else []
        if not inner:
            raise PacksError(
                [f"--packs {path}: it is not a pack directory (no {MANIFEST_NAME}) nor a directory of them"]
            )
        found.extend(inner)
    return found

"""The deterministic archive of tool/, and the unpack that refuses hostile archives."""

from __future__ import annotations

import hashlib
import io
import os
import tarfile
from pathlib import Path

import pytest

from packs.archive import ArchiveStats, build_archive, symlink_stays_inside, unpack_archive
from packs.errors import ArchiveError, BuildError

FILES = {
    "bin/run": (b"#!/bin/sh\necho hi\n", 0o700),
    "lib/data.txt": (b"data\n", 0o600),
    "lib/deep/er/x.json": (b"{}", 0o664),
    "README": (b"readme\n", 0o644),
}


def make_tree(root: Path, order: list[str], *, umask: int, uid: int, mtime: int) -> None:
    old = os.umask(umask)
    try:
        for rel in order:
            data, mode = FILES[rel]
            path = root / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
            os.chmod(path, mode & ~umask)
        (root / "bin" / "data").symlink_to("../lib/data.txt")
        (root / "empty").mkdir()
    finally:
        os.umask(old)
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = os.path.join(dirpath, name)
            os.lchown(p, uid, uid)
            if not os.path.islink(p):
                os.utime(p, (mtime, mtime))


def test_same_files_give_the_same_bytes_whatever_mtimes_owners_umask_and_order(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    make_tree(a, list(FILES), umask=0o022, uid=0, mtime=1_000_000)
    make_tree(b, list(reversed(FILES)), umask=0o077, uid=4242, mtime=1_700_000_000)
    for fmt in ("tar", "tar.gz"):
        data_a, stats_a = build_archive(a, fmt)
        data_b, stats_b = build_archive(b, fmt)
        assert hashlib.sha256(data_a).hexdigest() == hashlib.sha256(data_b).hexdigest()
        assert (
            stats_a
            == stats_b
            == ArchiveStats(entries=10, unpacked_bytes=sum(len(d) for d, _ in FILES.values()))
        )


def test_the_archive_holds_sorted_normalized_entries(tmp_path: Path) -> None:
    make_tree(tmp_path, list(FILES), umask=0o077, uid=1234, mtime=99)
    data, _ = build_archive(tmp_path)
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        rows = [(m.name, oct(m.mode), m.uid, m.gid, m.uname, m.gname, m.mtime) for m in tar]
    assert rows == [
        ("README", "0o644", 0, 0, "", "", 0),
        ("bin", "0o755", 0, 0, "", "", 0),
        ("bin/data", "0o777", 0, 0, "", "", 0),
        ("bin/run", "0o755", 0, 0, "", "", 0),
        ("empty", "0o755", 0, 0, "", "", 0),
        ("lib", "0o755", 0, 0, "", "", 0),
        ("lib/data.txt", "0o644", 0, 0, "", "", 0),
        ("lib/deep", "0o755", 0, 0, "", "", 0),
        ("lib/deep/er", "0o755", 0, 0, "", "", 0),
        ("lib/deep/er/x.json", "0o644", 0, 0, "", "", 0),
    ]


def test_changing_one_byte_changes_the_archive(tmp_path: Path) -> None:
    make_tree(tmp_path, list(FILES), umask=0o022, uid=0, mtime=0)
    before, _ = build_archive(tmp_path)
    (tmp_path / "README").write_bytes(b"readme!\n"[:7] + b"?")
    after, _ = build_archive(tmp_path)
    assert before != after


@pytest.mark.parametrize(
    ("make", "words"),
    [
        (lambda r: os.mkfifo(r / "pipe"), "tool/pipe is a fifo"),
        (lambda r: os.mknod(r / "null", 0o600 | 0o020000, os.makedev(1, 3)), "tool/null is a device file"),
        (lambda r: os.link(r / "README", r / "again"), "is a hard link (2 names for one file)"),
        (
            lambda r: (r / "out").symlink_to("/etc/passwd"),
            "tool/out is a symlink to '/etc/passwd', which leaves",
        ),
        (
            lambda r: (r / "up").symlink_to("../../secret"),
            "tool/up is a symlink to '../../secret', which leaves",
        ),
        (lambda r: (r / "dot").symlink_to("lib/../.."), "tool/dot is a symlink to 'lib/../..', which leaves"),
    ],
)
def test_the_build_refuses_what_the_archive_may_not_hold(tmp_path: Path, make, words: str) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "README").write_text("x")
    make(tmp_path)
    with pytest.raises(BuildError) as err:
        build_archive(tmp_path)
    assert words in str(err.value)


def test_symlink_rule() -> None:
    assert symlink_stays_inside(1, "../lib/x")
    assert symlink_stays_inside(0, "lib/x")
    assert not symlink_stays_inside(0, "../x")
    assert not symlink_stays_inside(2, "a/../../x")
    assert not symlink_stays_inside(3, "/tool/x")
    assert not symlink_stays_inside(3, ".")
    assert not symlink_stays_inside(3, "")


# Unpack ----------------------------------------------------------------------------------------------


def tar_of(*members: tuple[tarfile.TarInfo, bytes | None]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for info, data in members:
            if data is not None:
                info.size = len(data)
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return buf.getvalue()


def entry(name: str, kind: bytes = tarfile.REGTYPE, linkname: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.mode = kind, linkname, 0o644
    return info


def test_a_built_archive_unpacks_to_the_same_files(tmp_path: Path) -> None:
    src = tmp_path / "src"
    make_tree(src, list(FILES), umask=0o022, uid=0, mtime=0)
    for fmt in ("tar", "tar.gz"):
        data, stats = build_archive(src, fmt)
        dest = tmp_path / f"out-{fmt}"
        got = unpack_archive(
            data, dest, fmt=fmt, max_unpacked_bytes=stats.unpacked_bytes, max_entries=stats.entries
        )
        assert got == stats
        assert (dest / "bin" / "run").read_bytes() == FILES["bin/run"][0]
        assert os.stat(dest / "bin" / "run").st_mode & 0o777 == 0o755
        assert os.stat(dest / "lib" / "data.txt").st_mode & 0o777 == 0o644
        assert os.readlink(dest / "bin" / "data") == "../lib/data.txt"
        assert (dest / "bin" / "data").read_bytes() == b"data\n"


HOSTILE = [
    ("path traversal", [(entry("../evil"), b"x")], "archive entry '../evil' climbs out with '..'"),
    (
        "nested traversal",
        [(entry("a/../../evil"), b"x")],
        "archive entry 'a/../../evil' climbs out with '..'",
    ),
    (
        "absolute path",
        [(entry("/etc/evil"), b"x")],
        "archive entry '/etc/evil' has an absolute or malformed path",
    ),
    (
        "symlink out",
        [(entry("link", tarfile.SYMTYPE, "/etc"), None)],
        "archive entry 'link' is a symlink to '/etc', which leaves the archive",
    ),
    (
        "symlink up",
        [(entry("a/link", tarfile.SYMTYPE, "../../x"), None)],
        "archive entry 'a/link' is a symlink to '../../x', which leaves the archive",
    ),
    (
        "write through a symlink",
        [(entry("link", tarfile.SYMTYPE, "bin"), None), (entry("link/evil"), b"x")],
        "archive entry 'link/evil' lies under 'link', which is a symlink",
    ),
    (
        "hard link",
        [(entry("a"), b"x"), (entry("b", tarfile.LNKTYPE, "a"), None)],
        "archive entry 'b' is a hard link: hard links are refused",
    ),
    ("device file", [(entry("dev", tarfile.CHRTYPE), None)], "archive entry 'dev' is a device file"),
    ("fifo", [(entry("pipe", tarfile.FIFOTYPE), None)], "archive entry 'pipe' is a fifo"),
    ("duplicate", [(entry("a"), b"x"), (entry("a"), b"y")], "archive entry 'a' appears twice"),
]


@pytest.mark.parametrize(("members", "words"), [h[1:] for h in HOSTILE], ids=[h[0] for h in HOSTILE])
def test_a_hostile_archive_is_refused_and_nothing_is_written(
    tmp_path: Path, members: list[tuple[tarfile.TarInfo, bytes | None]], words: str
) -> None:
    dest = tmp_path / "dest"
    with pytest.raises(ArchiveError) as err:
        unpack_archive(tar_of(*members), dest, max_unpacked_bytes=1000, max_entries=100)
    assert str(err.value).startswith(words)
    assert not dest.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_more_entries_than_declared_are_refused(tmp_path: Path) -> None:
    data = tar_of(*[(entry(f"f{i}"), b"x") for i in range(5)])
    with pytest.raises(ArchiveError, match="^the archive holds more than 4 entries, the number declared$"):
        unpack_archive(data, tmp_path / "d", max_unpacked_bytes=1000, max_entries=4)
    assert unpack_archive(data, tmp_path / "ok", max_unpacked_bytes=5, max_entries=5).entries == 5


def test_more_bytes_than_declared_are_refused(tmp_path: Path) -> None:
    data = tar_of((entry("a"), b"x" * 600), (entry("b"), b"y" * 600))
    with pytest.raises(
        ArchiveError, match="^the archive unpacks to more than 1000 bytes, the size declared$"
    ):
        unpack_archive(data, tmp_path / "d", max_unpacked_bytes=1000, max_entries=10)
    assert not (tmp_path / "d").exists()


def test_garbage_and_wrong_formats_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ArchiveError, match="is not a valid tar.gz file"):
        unpack_archive(b"not gzip", tmp_path / "d", fmt="tar.gz", max_unpacked_bytes=10, max_entries=10)
    with pytest.raises(ArchiveError, match="archive format 'zip' is not accepted"):
        unpack_archive(b"", tmp_path / "d", fmt="zip", max_unpacked_bytes=10, max_entries=10)


def test_unpack_needs_an_empty_directory(tmp_path: Path) -> None:
    (tmp_path / "keep").write_text("mine")
    with pytest.raises(ArchiveError, match="is not empty"):
        unpack_archive(tar_of((entry("a"), b"x")), tmp_path, max_unpacked_bytes=10, max_entries=10)
    assert (tmp_path / "keep").read_text() == "mine"

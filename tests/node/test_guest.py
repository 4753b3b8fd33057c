"""The microvm guest (`b3os node build-guest`): its initramfs archive is reproducible, and a build is cached
by its inputs."""

from __future__ import annotations

import io
import os
import stat
from pathlib import Path

import pytest

from cli.main import main
from node.vm import cpio
from node.vm.guest import Guest, build_guest, find_guest


def test_the_same_entries_in_any_order_give_the_same_archive() -> None:
    entries = [
        cpio.Entry("usr", stat.S_IFDIR | 0o755, mtime=5),
        cpio.Entry("usr/bin", stat.S_IFDIR | 0o755, mtime=5),
        cpio.Entry("usr/bin/tool", stat.S_IFREG | 0o755, b"#!/bin/sh\n", mtime=7),
        cpio.Entry("bin", stat.S_IFLNK | 0o777, b"usr/bin", mtime=5),
    ]
    one, two = io.BytesIO(), io.BytesIO()
    cpio.write(one, entries)
    cpio.write(two, list(reversed(entries)))
    assert one.getvalue() == two.getvalue()
    assert len(one.getvalue()) % 512 == 0
    data = one.getvalue()
    # newc, sorted by path: bin before usr, and the trailer last
    assert data.startswith(b"070701")
    assert data.index(b"bin\0") < data.index(b"usr\0") < data.index(b"TRAILER!!!")


def test_a_tree_keeps_package_dates_and_clamps_newer_ones(tmp_path: Path) -> None:
    old, new = tmp_path / "old.py", tmp_path / "new.pyc"
    old.write_text("x = 1\n")
    new.write_text("compiled at install\n")
    os.utime(old, (1000, 1000))
    os.utime(new, (9000, 9000))
    (tmp_path / "skipme").mkdir()
    (tmp_path / "skipme" / "doc").write_text("no\n")
    entries = {e.path: e for e in cpio.tree(str(tmp_path), skip=("skip*",), clamp=5000)}
    assert set(entries) == {"old.py", "new.pyc"}
    assert entries["old.py"].mtime == 1000
    assert entries["new.pyc"].mtime == 5000


def test_the_guest_is_cached_by_its_inputs_and_rebuilds_to_the_same_bytes(
    guest: Guest, base_rootfs: Path, tmp_path: Path
) -> None:
    debs = sorted((guest.dir.parent / "debs").glob("*.deb"))
    assert debs, "the session's guest was built from a downloaded kernel package"
    first = build_guest(tmp_path, base_rootfs.parent, deb=debs[-1])
    assert first.key == guest.key
    built = first.initrd.stat().st_mtime_ns
    again = build_guest(tmp_path, base_rootfs.parent, deb=debs[-1])
    assert again.initrd.stat().st_mtime_ns == built  # cached: nothing was written
    forced = build_guest(tmp_path, base_rootfs.parent, deb=debs[-1], force=True)
    assert forced.initrd.read_bytes() == guest.initrd.read_bytes()
    assert forced.kernel.read_bytes() == guest.kernel.read_bytes()
    assert find_guest(tmp_path) == forced
    # the guest carries the init, the virtio modules it loads and no package manager
    archive = guest.initrd.read_bytes()
    for path in (b"init\0", b"etc/b3os-modules\0", b"virtio_console.ko\0", b"usr/bin/jq\0", b"python3.11\0"):
        assert path in archive
    assert b"usr/bin/apt-get\0" not in archive


def test_build_guest_says_what_is_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    deb = tmp_path / "none.deb"
    assert main(["node", "build-guest", "--kernel-deb", str(deb)]) == 2
    assert capsys.readouterr().err == f"b3os node build-guest: --kernel-deb {deb} is not a file\n"
    monkeypatch.setenv("B3OS_BASE_DIR", str(tmp_path / "base"))
    assert main(["node", "build-guest", "--guest-dir", str(tmp_path / "guest")]) == 1
    assert capsys.readouterr().err == (
        f"b3os node build-guest: no base template in {tmp_path / 'base'}: run `b3os node build-base` first\n"
    )

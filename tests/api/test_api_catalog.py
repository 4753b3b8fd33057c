"""The registry's newest version of every pack (`GET /v1/actions/packs`, MCP's tools), on SQLite and
PostgreSQL: the newest release by semver from every version's name, the rows read in batches."""

from __future__ import annotations

from sqlalchemy import Engine
from sqlmodel import Session

from api.models import Organization, Pack, PackVersion, Publisher
from api.registry import catalog

PACKS = 501  # more than one batch of rows (catalog._ROWS_AT_ONCE)


def test_the_newest_version_of_every_pack_by_semver(migrated_engine: Engine) -> None:
    versions = ("1.9.0", "1.10.0", "2.0.0-rc.1", "0.1.0")  # a prerelease is never the newest: releases only
    with Session(migrated_engine) as session:
        session.add(Organization(id="org_1", name="Acme"))
        session.flush()
        session.add(Publisher(namespace="com.example", org_id="org_1"))
        session.flush()
        seq = 0
        for n in range(PACKS):
            pack = f"com.example/p{n:03d}"
            session.add(Pack(id=pack, namespace="com.example"))
            session.flush()
            for version in versions[: 1 + n % len(versions)]:
                seq += 1
                core, _, prerelease = version.partition("-")
                major, minor, patch = (int(x) for x in core.split("."))
                session.add(
                    PackVersion(
                        pack=pack,
                        version=version,
                        major=major,
                        minor=minor,
                        patch=patch,
                        prerelease=prerelease,
                        content_hash="sha256:" + "a" * 64,
                        kid="com.example#k1",
                        manifest={"pack": pack, "version": version},
                        files=[],
                        seq=seq,
                        org_id="org_1",
                        published_by="key_1",
                    )
                )
        session.commit()
    with Session(migrated_engine) as session:
        newest = catalog.newest_of_each(session)
    assert list(newest) == [f"com.example/p{n:03d}" for n in range(PACKS)]  # every pack, in order
    expected = {1: "1.9.0", 2: "1.10.0", 3: "1.10.0", 4: "1.10.0"}
    assert {p: v.version for p, v in newest.items()} == {
        f"com.example/p{n:03d}": expected[1 + n % len(versions)] for n in range(PACKS)
    }
    assert all(v.manifest == {"pack": p, "version": v.version} for p, v in newest.items())

"""`b3os dev`'s first-start state: made once, then reused (same key, same signing key)."""

from __future__ import annotations

from pathlib import Path

import pytest

from cli.dev_state import DEV_KID, prepare


def test_dev_state_is_made_on_first_start_and_reused_after(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("B3OS_KEYS_DIR", str(tmp_path / "keys"))
    monkeypatch.delenv("B3OS_DATABASE_URL", raising=False)
    monkeypatch.delenv("DATABASE_URL", raising=False)
    first = prepare(tmp_path / "dev", "http://127.0.0.1:8700")
    second = prepare(tmp_path / "dev", "http://127.0.0.1:8701")
    assert first.api_key == second.api_key and first.node_credential == second.node_credential
    assert first.node_credential.startswith("b3n_") and second.node_id == "node-127.0.0.1-8710"
    # another node port is another node id: it gets a credential of its own
    third = prepare(tmp_path / "dev", "http://127.0.0.1:8701", node_id="node-127.0.0.1-8711")
    assert third.node_credential != first.node_credential and third.node_id == "node-127.0.0.1-8711"
    assert first.api_key.startswith("b3_") and second.kid == DEV_KID
    env = (tmp_path / "dev" / "dev.env").read_text().splitlines()
    assert env[0] == "B3OS_API_URL=http://127.0.0.1:8701" and f"B3OS_API_KEY={first.api_key}" in env
    assert (tmp_path / "dev" / "dev.env").stat().st_mode & 0o777 == 0o600
    assert (tmp_path / "dev" / "b3os.db").is_file()

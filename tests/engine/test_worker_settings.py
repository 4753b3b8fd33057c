"""The routine worker's settings as an operator meets them: a bad one is a sentence, never a traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from engine.worker import tls_config

REPO = Path(__file__).resolve().parents[2]


def test_a_worker_with_an_unreadable_tls_file_stops_with_a_sentence(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("B3OS_")}
    env.update(
        B3OS_TEMPORAL_TLS_CA_FILE=str(tmp_path / "missing-ca.pem"), B3OS_TEMPORAL_ADDRESS="127.0.0.1:1"
    )
    done = subprocess.run(
        [sys.executable, "-m", "engine.worker"], cwd=REPO, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 1
    assert "the Temporal TLS settings are wrong: cannot read" in done.stderr
    assert "missing-ca.pem" in done.stderr and "Traceback" not in done.stderr


def test_tls_is_off_unless_asked_and_a_certificate_needs_its_key(tmp_path: Path) -> None:
    assert tls_config(enabled=False, ca_file=None, cert_file=None, key_file=None, server_name=None) is None
    cert = tmp_path / "client.pem"
    cert.write_text("-----BEGIN CERTIFICATE-----\n")
    with pytest.raises(ValueError, match="go together"):
        tls_config(enabled=True, ca_file=None, cert_file=cert, key_file=None, server_name=None)
    made = tls_config(enabled=True, ca_file=cert, cert_file=None, key_file=None, server_name="temporal")
    assert made is not None and made.server_root_ca_cert == cert.read_bytes() and made.domain == "temporal"

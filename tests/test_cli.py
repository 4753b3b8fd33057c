"""The `b3os` command as a whole, and the test session's independence from the checkout's `.b3os/`."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from hermetic import hermetic
from loopback import send_json

from cli.main import main

REPO = Path(__file__).resolve().parent.parent


def test_b3os_help_lists_the_command_groups() -> None:
    out = subprocess.run([sys.executable, "-m", "cli", "--help"], capture_output=True, text=True, check=True)
    assert "usage: b3os" in out.stdout


def _dead_api_url() -> str:
    """The URL of a loopback port nothing listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def _earnings_in_process(capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    capsys.readouterr()
    code = main(["tool", "earnings", "--namespace", "com.example.tools"])
    return code, capsys.readouterr().err


def _earnings_subprocess() -> tuple[int, str]:
    done = subprocess.run(
        [sys.executable, "-m", "cli", "tool", "earnings", "--namespace", "com.example.tools"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    return done.returncode, done.stderr


def test_tests_run_outside_the_checkout_without_the_callers_settings(fresh_machine: Path) -> None:
    assert Path.cwd() == fresh_machine and not fresh_machine.is_relative_to(REPO)
    assert not (Path.cwd() / ".b3os").exists()
    assert "B3OS_API_URL" not in os.environ and "B3OS_API_KEY" not in os.environ
    assert not Path(os.environ["B3OS_KEYS_DIR"]).is_relative_to(Path.home() / ".b3os")


def test_a_dev_env_left_in_the_checkout_does_not_reach_the_cli_under_test(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    dead = _dead_api_url()
    checkout = tmp_path / "checkout"  # stands for a checkout where `make run` left its dev.env
    (checkout / ".b3os").mkdir(parents=True)
    (checkout / ".b3os" / "dev.env").write_text(f"B3OS_API_URL={dead}\nB3OS_API_KEY=b3_left_by_make_run\n")
    monkeypatch.chdir(checkout)  # as if pytest had been started there
    monkeypatch.setenv("B3OS_NODE_CREDENTIAL", "exported-by-the-callers-shell")
    code, err = _earnings_in_process(capsys)
    assert code == 1 and dead in err, "run there, the CLI calls the api that dev.env names"
    with hermetic(tmp_path / "fresh") as work:
        assert Path.cwd() == work and "B3OS_NODE_CREDENTIAL" not in os.environ
        for code, err in (_earnings_in_process(capsys), _earnings_subprocess()):
            assert code == 1 and "Traceback" not in err
            assert "No API key" in err and dead not in err
    assert Path.cwd() == checkout and os.environ["B3OS_NODE_CREDENTIAL"] == "exported-by-the-callers-shell"


def test_b3os_help_names_only_commands_that_exist() -> None:
    """Each group's line in `b3os --help` lists its commands, and each one it lists answers `--help`."""
    from cli.main import GROUP_HELP

    out = subprocess.run([sys.executable, "-m", "cli", "--help"], capture_output=True, text=True, check=True)
    text = " ".join(out.stdout.split())
    assert "describe" not in text
    assert "routine routines: validate, test, schema, run, cost, schedule, schedules" in text
    for group, about in GROUP_HELP.items():
        listed = text.split(f" {group} {about}: ", 1)[1].split(" ")[0:20]
        names = []
        for word in listed:
            names.append(word.rstrip(","))
            if not word.endswith(","):
                break
        assert names, group
        for name in names:
            with pytest.raises(SystemExit) as shown:
                main([group, name, "--help"])
            assert shown.value.code == 0, (group, name)


def test_ctrl_c_waits_for_the_request_in_flight_then_cancels_the_run_on_the_same_connection() -> None:
    # Ctrl-C raised inside httpx's connection pool could leave the pool's lock taken: the cancel (or the
    # client's close) then waited for it for ever, a CLI that never exited. It is taken between requests:
    # the read in flight ends, and the cancel goes on the connection that read kept.
    import cli.routine_run
    from b3os import B3OS

    seen: list[tuple[str, str, int]] = []

    class Api(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as the api

        def _answer(self, status: int, body: dict[str, object]) -> None:
            send_json(self, status, body)

        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            seen.append(("GET", self.path.partition("?")[0], self.client_address[1]))
            if len(seen) == 1:
                os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C while the CLI waits for this answer
                time.sleep(0.2)
            # a CLI that missed the Ctrl-C reads again: the run has ended then, and the test fails at once
            self._answer(200, {"run_id": "run_x", "status": "running" if len(seen) == 1 else "succeeded"})

        def do_POST(self) -> None:  # noqa: N802
            seen.append(("POST", self.path, self.client_address[1]))
            self._answer(202, {"run_id": "run_x", "status": "cancelling"})

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Api)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    # Ctrl-C as a terminal sends it: an xdist worker ignores SIGINT, and a process that ignores it (a
    # command started in the background) keeps ignoring it in the CLI too
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with B3OS(f"http://127.0.0.1:{server.server_address[1]}", "b3_" + "k" * 40) as client:
            final = cli.routine_run.follow_new_run(
                client, lambda: {"run_id": "run_x"}, lambda _: "started", quiet=True
            )
        assert final is None  # cancelled
        assert [(method, path) for method, path, _ in seen] == [
            ("GET", "/v1/runs/run_x"),
            ("POST", "/v1/runs/run_x/cancel"),
        ]
        assert seen[0][2] == seen[1][2]  # one connection: the read was not cut off
    finally:
        signal.signal(signal.SIGINT, previous)
        server.shutdown()
        server.server_close()

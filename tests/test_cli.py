"""The `b3os` command as a whole, and the test session's independence from the checkout's `.b3os/`."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from hermetic import hermetic

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


def test_ctrl_c_cancels_the_run_through_a_client_of_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    # Ctrl-C can stop the followed request inside httpx's connection pool with the pool's lock taken: the
    # interrupted client's next request then waited for that lock for ever (a CLI that never exited)
    import cli.routine_run
    from b3os import B3OS
    from cli._http import ApiConfig

    cancels: list[str] = []

    class Api(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (http.server's name)
            cancels.append(self.path)
            body = json.dumps({"run_id": "run_x", "status": "cancelling"}).encode()
            self.send_response(202)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Api)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    config = ApiConfig(url=f"http://127.0.0.1:{server.server_address[1]}", key="b3_" + "k" * 40)
    interrupted = B3OS(config.url, config.key)
    pool_lock = interrupted._http._transport._pool._optional_thread_lock._lock  # type: ignore[attr-defined]
    pool_lock.acquire()  # as Ctrl-C left it

    def follow(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(cli.routine_run, "follow", follow)
    ended: list[object] = []
    runs = threading.Thread(
        target=lambda: ended.append(
            cli.routine_run.follow_new_run(
                interrupted, lambda: {"run_id": "run_x"}, lambda _: "started", quiet=True, config=config
            )
        ),
        daemon=True,
    )
    try:
        runs.start()
        runs.join(timeout=30)
        assert ended == [None], "the CLI did not end after Ctrl-C"
        assert cancels == ["/v1/runs/run_x/cancel"]
    finally:
        server.shutdown()
        server.server_close()
        pool_lock.release()
        interrupted.close()

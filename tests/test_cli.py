import subprocess
import sys


def test_b3os_help_lists_the_command_groups() -> None:
    out = subprocess.run([sys.executable, "-m", "cli", "--help"], capture_output=True, text=True, check=True)
    assert "usage: b3os" in out.stdout

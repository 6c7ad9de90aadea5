"""The start-up status of ``demo``, ``bench`` and ``preview``: a spinner on stderr that names
each step from the first second, only where stderr is a terminal.

Real terminals are pseudo-terminals (``pty``) here; on a pipe a normal run prints only what the
user asked for.
"""

import io
import json
import os
import pathlib
import pty
import select
import subprocess
import sys
import time

import pytest

from energon_plugins.cli._output import startup_status

SCRIPT = pathlib.Path(sys.executable).with_name("energon-plugins")
ENV = {
    **os.environ,
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "COLUMNS": "120",
    "TERM": "xterm-256color",
}


def read_all(fd: int, proc: subprocess.Popen, timeout: float) -> bytes:
    """Everything written to the pty's master ``fd`` until ``proc`` ends (and the pty drains)."""
    out = b""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.1)
        if ready:
            try:
                data = os.read(fd, 65536)
            except OSError:  # the child closed its end
                break
            if not data:
                break
            out += data
        elif proc.poll() is not None:
            break
    return out


def run_with_terminal_stderr(args: list[str], timeout: float = 120) -> tuple[int, str, str]:
    """Run the CLI with stderr on a pseudo-terminal and stdout on a pipe; return
    ``(exit status, stdout, what the terminal received)``."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [str(SCRIPT), *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=slave,
        env=ENV,
        close_fds=True,
    )
    os.close(slave)
    try:
        terminal = read_all(master, proc, timeout)
        stdout = proc.communicate(timeout=timeout)[0]
    finally:
        os.close(master)
    return proc.returncode, stdout.decode(), terminal.decode(errors="replace")


def test_status_writes_nothing_where_stderr_is_not_a_terminal():
    stream = io.StringIO()
    with startup_status("importing torch...", stream=stream) as status:
        status.update("building the loader...")
        status.stop()
    assert stream.getvalue() == ""


def test_status_shows_each_step_on_a_terminal_and_clears_its_line():
    master, slave = pty.openpty()
    with os.fdopen(slave, "w", encoding="utf-8") as stream:
        with startup_status("importing torch...", stream=stream) as status:
            status.update("building the loader [0 workers]...")  # plain text, not markup
        stream.flush()
        shown = b""
        while select.select([master], [], [], 0.2)[0]:
            shown += os.read(master, 65536)
    os.close(master)
    text = shown.decode()
    assert "importing torch..." in text
    assert "building the loader [0 workers]..." in text
    assert "\x1b[?25h" in text and text.endswith("\x1b[2K")  # cursor back, line erased


@pytest.fixture()
def bad_config(tmp_path: pathlib.Path) -> pathlib.Path:
    config = tmp_path / "bad.yaml"
    config.write_text("path: nowhere\nseq_length: -1\n")
    return config


def test_preview_on_a_pipe_prints_only_the_error(bad_config):
    proc = subprocess.run(
        [str(SCRIPT), "preview", str(bad_config)],
        capture_output=True,
        text=True,
        env=ENV,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 1
    assert proc.stdout == ""
    assert proc.stderr.startswith("Error: ") and "seq_length" in proc.stderr
    assert "checking" not in proc.stderr and "\x1b[" not in proc.stderr


@pytest.mark.parametrize("verb", ["preview", "bench"])
def test_the_status_shows_at_once_on_a_terminal(verb, bad_config):
    """The config is checked (and named on the status) before torch is imported: a mistake
    is reported in well under the seconds the heavy imports take."""
    status, stdout, terminal = run_with_terminal_stderr([verb, str(bad_config)])
    assert status == 1 and stdout == ""
    assert f"checking {bad_config}..." in terminal
    assert "importing torch" not in terminal
    assert "Error: " in terminal and "seq_length" in terminal


@pytest.mark.slow
def test_bench_names_its_steps_on_the_terminal_and_keeps_stdout_clean(tmp_path):
    """The whole start-up under a terminal: every step named in order, and stdout (a pipe)
    holds only the JSON asked for."""
    from energon_plugins.cli.demo_cmd import prepare_demo_data

    paths = prepare_demo_data(str(tmp_path / "demo"))
    config = tmp_path / "run.yaml"
    config.write_text(
        f"path: {paths['path']}\ntokenizer: {{path: {paths['tokenizer']}}}\nseq_length: 512\nnum_workers: 0\n"
    )
    status, stdout, terminal = run_with_terminal_stderr(
        ["bench", str(config), "--batches", "2", "--json"], timeout=300
    )
    assert status == 0, terminal[-3000:]
    assert json.loads(stdout)["batches"] == 2
    steps = [
        "checking ",
        "importing torch, transformers and Energon...",
        "loading the tokenizer",
        "starting the loader (0 workers)",
    ]
    positions = [terminal.find(step) for step in steps]
    assert -1 not in positions and positions == sorted(positions), positions

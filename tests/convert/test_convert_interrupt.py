"""Ctrl-C and SIGTERM never hang ``convert`` (issue 25), and ``--resume`` is exact after them.

The real command runs in a subprocess (its own session and process
group, ``--workers 2``) on one LLaVA source of ``RECORDS`` records with tiny images, written
once for the module, and is stopped ``INTERRUPTS`` times at random moments after its work
began: SIGINT to the process group (what a terminal sends on Ctrl-C), SIGTERM to the group or
to the main process only (a job scheduler's pre-emption), or SIGINT twice. Its stdio is a
pseudo-terminal (the progress display runs) in half of the runs and pipes in the other half.
Every run must end within ``DEADLINE`` seconds of the (first) signal, with the resume hint, no
traceback and exit status 130 (SIGINT) or 143 (SIGTERM), and leave no process of its session
behind.

The runs form ``CHAINS`` chains: each run after a chain's first continues (``--resume``) what
the one before left, so the moments fall in the streaming, at checkpoints and in Energon's
indexing step; after a chain's last interrupt ``--resume`` completes it, and its shards,
their indexes, the report, ``.nv-meta``'s files and the index's sample list must equal an
uninterrupted conversion's byte for byte. The chains run at the same time.

A seeded generator draws the modes and moments: a failure names the seed, the run, its mode
and delay; ``ENERGON_PLUGINS_INTERRUPT_SEED=N`` replays a plan.
"""

import concurrent.futures
import dataclasses
import fcntl
import hashlib
import io
import json
import os
import pathlib
import random
import signal
import sqlite3
import struct
import subprocess
import sys
import termios
import threading
import time

import pytest
from PIL import Image

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs /proc and ptys"),
]

RECORDS = 3000
CHAINS = 2
INTERRUPTS = 50
INDEXING = 4
DEADLINE = 2.0
SEED = int(os.environ.get("ENERGON_PLUGINS_INTERRUPT_SEED", "25"))
MODES = ("sigint-group", "sigterm-group", "sigterm-main", "sigint-twice")
HINT = "Interrupted. Run the same command with --resume to continue from the last checkpoint"
SETTINGS = ["--split-ratio", "train=0.9,val=0.1", "--shard-size", "64KB", "--workers", "2"]


@dataclasses.dataclass(frozen=True)
class Stop:
    """One planned interrupt."""

    chain: int
    step: int
    mode: str
    terminal: bool
    indexing: bool
    """The moment is counted from the start of Energon's indexing (its worker processes, the
    command's grandchildren), else from the start of the run's work (its first child)."""
    delay: float
    gap: float
    """Seconds between the two signals of ``sigint-twice``."""

    def describe(self) -> str:
        """What to quote when this run fails."""
        return (
            f"seed {SEED}, chain {self.chain} run {self.step}: {self.mode}, "
            f"{'pseudo-terminal' if self.terminal else 'pipes'}, delay {self.delay:.3f} s "
            f"after {'indexing' if self.indexing else 'work'} began"
            + (f", gap {self.gap:.3f} s" if self.mode == "sigint-twice" else "")
        )


def plan() -> list[list[Stop]]:
    """``CHAINS`` chains of interrupts, half of each mode under a pseudo-terminal; in
    ``INDEXING`` of them (never a chain's first) the moment falls in Energon's indexing."""
    rng = random.Random(SEED)
    per_chain = INTERRUPTS // CHAINS
    kinds = [(mode, terminal) for mode in MODES for terminal in (True, False)]
    picks = [kinds[n % len(kinds)] for n in range(INTERRUPTS)]
    rng.shuffle(picks)
    later = [(chain, step) for chain in range(CHAINS) for step in range(1, per_chain)]
    indexing = set(rng.sample(later, INDEXING))
    return [
        [
            Stop(
                chain,
                step,
                *picks[chain * per_chain + step],
                (chain, step) in indexing,
                delay=rng.uniform(0.0, 0.3 if (chain, step) in indexing else 1.5),
                gap=rng.uniform(0.0, 0.3),
            )
            for step in range(per_chain)
        ]
        for chain in range(CHAINS)
    ]


# ----------------------------------------------------------------------------- the data
@pytest.fixture(scope="module")
def source(tmp_path_factory) -> pathlib.Path:
    """``data.json`` (LLaVA layout) and ``images/``: RECORDS records, every 250th rejected."""
    root = tmp_path_factory.mktemp("interrupt-source")
    images = root / "images"
    images.mkdir()
    for n in range(16):
        buffer = io.BytesIO()
        Image.new("RGB", (8 + n, 6 + n), (15 * n, 90, 200 - 9 * n)).save(buffer, format="PNG")
        (images / f"{n}.png").write_bytes(buffer.getvalue())
    records = [
        {
            "id": f"r{i}",
            "image": "missing.png" if i % 250 == 7 else f"{i % 16}.png",
            "conversations": [
                {"from": "human", "value": f"<image>\nWhat is shape {i}?"},
                {"from": "gpt", "value": f"Shape {i}, colour {i % 16}."},
            ],
        }
        for i in range(RECORDS)
    ]
    (root / "data.json").write_text(json.dumps(records), encoding="utf-8")
    return root


def command(source: pathlib.Path, output: pathlib.Path, *extra: str) -> list[str]:
    """The ``convert`` command line for ``source`` into ``output``."""
    return [
        sys.executable,
        "-m",
        "energon_plugins",
        "convert",
        str(source / "data.json"),
        str(output),
        "--from",
        "llava-json",
        "-o",
        f"image_folder={source / 'images'}",
        *SETTINGS,
        *extra,
    ]


def environment() -> dict[str, str]:
    """The child's environment: offline, with this checkout importable."""
    root = str(pathlib.Path(__file__).resolve().parents[2])
    path = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": path, "COLUMNS": "100"}


def uninterrupted(source: pathlib.Path, output: pathlib.Path) -> dict[str, object]:
    """What a run that nobody stops writes (:func:`written`)."""
    done = subprocess.run(
        command(source, output), capture_output=True, text=True, env=environment(), timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return written(output)


def written(output: pathlib.Path) -> dict[str, object]:
    """SHA-256 of every shard, shard index, the report and ``.nv-meta``'s files (not the
    SQLite file itself: its pages need not repeat), plus the index's sample list."""
    names = [
        *output.glob("*.tar"),
        *output.glob("*.tar.idx"),
        output / "rejected.jsonl",
        *(output / ".nv-meta" / name for name in ("split.yaml", "dataset.yaml", ".info.json")),
    ]
    hashes = {path.name: hashlib.sha256(path.read_bytes()).hexdigest() for path in names}
    with sqlite3.connect(output / ".nv-meta" / "index.sqlite") as db:
        samples = db.execute(
            "SELECT tar_file_id, sample_key, sample_index, byte_offset, byte_size"
            " FROM samples ORDER BY tar_file_id, sample_index"
        ).fetchall()
    return {"files": hashes, "samples": samples}


# ----------------------------------------------------------------------------- one run
def _children(pid: int) -> list[int]:
    """The child processes of ``pid`` (none once it is gone)."""
    try:
        listed = pathlib.Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(n) for n in listed.split()]


class Run:
    """``convert`` in a new session; its output on a pseudo-terminal or on a pipe."""

    def __init__(self, args: list[str], terminal: bool) -> None:
        self.chunks: list[bytes] = []
        if terminal:
            reader, child_side = os.openpty()
            fcntl.ioctl(child_side, termios.TIOCSWINSZ, struct.pack("HHHH", 30, 100, 0, 0))
            self.process = subprocess.Popen(
                args,
                stdin=child_side,
                stdout=child_side,
                stderr=child_side,
                env=environment(),
                start_new_session=True,
            )
            os.close(child_side)
        else:
            self.process = subprocess.Popen(
                args,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                env=environment(),
                start_new_session=True,
            )
            reader = self.process.stdout.fileno()
        self._drain = threading.Thread(target=self._read, args=(reader, terminal), daemon=True)
        self._drain.start()

    def _read(self, fd: int, terminal: bool) -> None:
        while True:
            try:
                chunk = os.read(fd, 65536)
            except OSError:  # EIO: the pseudo-terminal's other side is closed
                chunk = b""
            if not chunk:
                break
            self.chunks.append(chunk)
        if terminal:
            os.close(fd)

    def output(self) -> str:
        """Everything it printed so far."""
        self._drain.join(5)
        return b"".join(self.chunks).decode("utf-8", "replace")

    def wait_until_working(self, timeout: float = 60.0) -> bool:
        """Wait until the command started a child process (its work began): False if it ended."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                return False
            if _children(self.process.pid):
                return True
            time.sleep(0.005)
        raise AssertionError(f"no child process after {timeout} s:\n{self.output()[-2000:]}")

    def wait_until_indexing(self, timeout: float = 120.0) -> bool:
        """Wait until a child of the command has children (Energon's indexing workers):
        False if it ended first."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                return False
            for child in _children(self.process.pid):
                if _children(child):
                    return True
            time.sleep(0.005)
        raise AssertionError(f"no indexing after {timeout} s:\n{self.output()[-2000:]}")

    def session_left(self) -> list[str]:
        """Live processes still in its session (zombies excepted), as ``pid name state``."""
        left = []
        for stat in pathlib.Path("/proc").glob("[0-9]*/stat"):
            try:
                text = stat.read_text()
            except OSError:
                continue
            name = text[text.index("(") + 1 : text.rindex(")")]
            fields = text[text.rindex(")") + 2 :].split()
            if int(fields[3]) == self.process.pid and fields[0] != "Z":
                left.append(f"{stat.parent.name} {name} {fields[0]}")
        return left

    def kill(self) -> None:
        """Kill its whole process group (a failed test leaves nothing running)."""
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except OSError:
            pass
        self.process.wait(10)


FINISHED = "finished before the signal"


def interrupt(run: Run, stop: Stop, seconds: list[float]) -> str:
    """Stop ``run`` as ``stop`` says; check how it ends (the seconds from the signal to its
    end go to ``seconds``). Returns a problem, "" if none, or :data:`FINISHED` when the
    conversion completed before the moment came."""
    if run.wait_until_indexing() if stop.indexing else run.wait_until_working():
        time.sleep(stop.delay)
    if run.process.poll() is not None:
        if run.process.wait() == 0:
            return FINISHED
        return f"it failed before the signal: exit {run.process.returncode}\n{run.output()[-2000:]}"
    pid = run.process.pid
    signalled = time.monotonic()
    try:
        if stop.mode == "sigterm-main":
            os.kill(pid, signal.SIGTERM)
        else:
            os.killpg(pid, signal.SIGTERM if stop.mode == "sigterm-group" else signal.SIGINT)
        if stop.mode == "sigint-twice":
            time.sleep(stop.gap)
            if run.process.poll() is None:
                os.killpg(pid, signal.SIGINT)
    except ProcessLookupError:  # it ended meanwhile (checked below)
        pass
    try:
        code = run.process.wait(DEADLINE + 10)
    except subprocess.TimeoutExpired:
        code = None
    took = time.monotonic() - signalled
    seconds.append(took)
    text = run.output()
    expected = {143} if stop.mode.startswith("sigterm") else {130}
    if stop.mode == "sigint-twice":  # the second one may come as it exits: SIGINT's own end
        expected.add(-signal.SIGINT)
    problems = []
    if code is None:
        problems.append(f"still running {took:.1f} s after the signal (hung)")
    elif took > DEADLINE:
        problems.append(f"ended {took:.2f} s after the signal (more than {DEADLINE} s)")
    if code is not None and code not in expected:
        problems.append(f"exit status {code}, not {' or '.join(map(str, sorted(expected)))}")
    if HINT not in text:
        problems.append("no resume hint")
    if any(word in text for word in ("Traceback", "Error", "Exception")):
        problems.append("a traceback or an error in its output")
    for _ in range(200):  # the workers and the indexing's processes die with it
        left = run.session_left()
        if not left:
            break
        time.sleep(0.01)
    if left:
        problems.append(f"processes left behind: {left}")
    if not problems:
        return ""
    run.kill()
    return "; ".join(problems) + f"\n--- its output:\n{text[-3000:]}"


def run_chain(chain: list[Stop], source: pathlib.Path, output: pathlib.Path) -> tuple[list[str], list[float]]:
    """Each interrupt of ``chain`` on one output folder, then a completing ``--resume``: the
    failures, and the seconds from each signal to the end of its run.

    A run that completes the conversion before its moment (a fast machine) is repeated from
    scratch (``--overwrite``), so that every planned interrupt happens."""
    failures: list[str] = []
    seconds: list[float] = []
    for stop in chain:
        extra = ["--resume"] if stop.step else []
        for _attempt in range(3):
            run = Run(command(source, output, *extra), stop.terminal)
            try:
                problem = interrupt(run, stop, seconds)
            finally:
                if run.process.poll() is None:
                    run.kill()
            if problem != FINISHED:
                break
            extra = ["--overwrite"]
        if problem:
            failures.append(f"{stop.describe()}: {problem}")
    done = subprocess.run(
        command(source, output, "--resume", "--json"),
        capture_output=True,
        text=True,
        env=environment(),
        timeout=300,
    )
    if done.returncode != 0:
        failures.append(
            f"seed {SEED}, chain {chain[0].chain}: the completing --resume failed "
            f"(exit {done.returncode}):\n{done.stderr[-3000:]}"
        )
    return failures, seconds


# ----------------------------------------------------------------------------- the test
def test_every_interrupt_stops_at_once_and_resume_is_exact(source, tmp_path):
    chains = plan()
    assert sum(map(len, chains)) == INTERRUPTS
    assert {(s.mode, s.terminal) for c in chains for s in c} == {(m, t) for m in MODES for t in (True, False)}
    reference = uninterrupted(source, tmp_path / "reference")
    with concurrent.futures.ThreadPoolExecutor(len(chains)) as pool:
        outcomes = list(
            pool.map(
                run_chain,
                chains,
                [source] * len(chains),
                [tmp_path / f"chain-{n}" for n in range(len(chains))],
            )
        )
    failures = [failure for found, _ in outcomes for failure in found]
    seconds = sorted(took for _, found in outcomes for took in found)
    print(
        f"seed {SEED}: {len(seconds)} interrupts, from the signal to the end: median "
        f"{seconds[len(seconds) // 2]:.2f} s, longest {seconds[-1]:.2f} s"
    )
    assert not failures, f"{len(failures)} of {INTERRUPTS} interrupts failed:\n\n" + "\n\n".join(failures)
    for n in range(len(chains)):
        assert written(tmp_path / f"chain-{n}") == reference, (
            f"seed {SEED}, chain {n}: the resumed output differs from an uninterrupted run's"
        )

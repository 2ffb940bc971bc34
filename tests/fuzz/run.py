"""Run one fuzz case in process (`gpuplan.cli.main`) or as a real `python -m gpuplan` process."""

from __future__ import annotations

import contextlib
import io
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time
import traceback
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from .gen import Case

LIMIT_S = 5.0  # a case that uses more CPU seconds is a hang (CPU, so a loaded machine cannot
WALL_S = 60.0  # fake one); one that takes this long on the wall clock is one too
# documented as slower: leave-one-source-out refits the constants once per publication (~11 CPU
# seconds, no typed number makes it longer; `--calibrate --residuals` runs it too), so the
# limit for it is wider
SLOW_FLAGS = {"--cross-validate": 20.0, "--residuals": 20.0}


def limit_for(case: Case) -> float:
    """The CPU-seconds limit of a case: LIMIT_S, or that of a documented slow flag it has."""
    return max([LIMIT_S] + [s for f, s in SLOW_FLAGS.items() if f in case.argv])
SRC = str(Path(__file__).resolve().parents[2] / "src")


@dataclass
class Outcome:
    case: Case
    rc: int | None
    stdout: str
    stderr: str
    seconds: float
    exception: str = ""  # an exception that escaped main(), with its last frame
    timed_out: bool = False
    warnings: list[str] = field(default_factory=list)
    process: bool = False


class _Timeout(BaseException):
    """Raised by the alarm; a BaseException so that no `except Exception` swallows it."""


def _materialize(case: Case, where: str) -> tuple[list[str], dict[str, str]]:
    for name, data in case.files:
        p = Path(where, name)
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
    argv = [a.replace("{dir}", where) for a in case.argv]
    env = {k: v.replace("{dir}", where) for k, v in case.env}
    return argv, env


@contextlib.contextmanager
def _environ(env: dict[str, str]):  # type: ignore[no-untyped-def]
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _children_cpu() -> float:
    use = resource.getrusage(resource.RUSAGE_CHILDREN)
    return use.ru_utime + use.ru_stime


def _on_alarm(signum: int, frame: object) -> None:
    raise _Timeout


def run_inproc(case: Case, limit_s: float | None = None) -> Outcome:
    """Call gpuplan.cli.main(argv) with stdout/stderr captured and an alarm at limit_s
    (default: `limit_for(case)`)."""
    limit_s = limit_for(case) if limit_s is None else limit_s
    from gpuplan.catalog import loader as catalog
    from gpuplan.cli import main

    out, err = io.StringIO(), io.StringIO()
    rc: int | None = None
    exc, timed_out = "", False
    with tempfile.TemporaryDirectory() as where:
        argv, env = _materialize(case, where)
        if case.files or env:
            catalog._load.cache_clear()  # overlay paths differ per case; keep memory flat
        old = signal.signal(signal.SIGALRM, _on_alarm), signal.signal(signal.SIGPROF, _on_alarm)
        t0 = time.process_time()
        with _environ(env), warnings.catch_warnings(record=True) as caught, \
                contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            warnings.simplefilter("always")
            signal.setitimer(signal.ITIMER_PROF, limit_s)
            signal.setitimer(signal.ITIMER_REAL, WALL_S)
            try:
                rc = main(argv)
            except _Timeout:
                timed_out = True
            except SystemExit as e:
                rc = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
            except BaseException as e:  # noqa: BLE001 - the fuzzer records every escape
                tb = traceback.extract_tb(e.__traceback__)[-1]
                exc = f"{type(e).__name__}: {str(e)[:160]} at {Path(tb.filename).name}:{tb.lineno}"
            finally:
                signal.setitimer(signal.ITIMER_PROF, 0)
                signal.setitimer(signal.ITIMER_REAL, 0)
        seconds = time.process_time() - t0
        signal.signal(signal.SIGALRM, old[0])
        signal.signal(signal.SIGPROF, old[1])
    return Outcome(case=case, rc=rc, stdout=out.getvalue(), stderr=err.getvalue(),
                   seconds=seconds, exception=exc, timed_out=timed_out,
                   warnings=[f"{w.category.__name__}: {w.message}" for w in caught])


def run_process(case: Case, limit_s: float | None = None, hard_s: float = WALL_S) -> Outcome:
    """`python -m gpuplan ARGV` in a fresh process; killed after hard_s wall seconds, a hang
    past limit_s CPU seconds (interpreter start-up included; default `limit_for(case)`)."""
    limit_s = limit_for(case) if limit_s is None else limit_s
    with tempfile.TemporaryDirectory() as where:
        argv, env = _materialize(case, where)
        full = {**os.environ, **env, "PYTHONPATH": SRC}
        t0 = _children_cpu()
        try:
            p = subprocess.run([sys.executable, "-m", "gpuplan", *argv], capture_output=True,
                               env=full, cwd=where, timeout=hard_s, check=False)
        except subprocess.TimeoutExpired:
            return Outcome(case=case, rc=None, stdout="", stderr="", seconds=hard_s,
                           timed_out=True, process=True)
        seconds = _children_cpu() - t0
    return Outcome(case=case, rc=p.returncode, stdout=p.stdout.decode("utf-8", "replace"),
                   stderr=p.stderr.decode("utf-8", "replace"), seconds=seconds,
                   timed_out=seconds > limit_s, process=True)

"""tenure's component benchmarks (bench/owner.py, bench/handoff.py) as bench/suite.py runs
them: each in a child process of its own session, under a hard time cap, its result the
JSON object on its last stdout line; anything it left running is stopped afterwards.
Only tenure has these parts, so they have no peer figures (bench/peers/targets.py judges
them on their own).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import psutil

from bench import aggregate
from bench.peers.base import TOKEN_VAR, has_token, running

ROOT = Path(__file__).resolve().parent.parent

# After a component benchmark's timeout, how long its process group has between SIGTERM
# and SIGKILL: bench/handoff.py stops the tenure it started on SIGTERM.
COMPONENT_GRACE_S = 30.0


def run_component(argv: list[str], timeout: float,
                  grace: float = COMPONENT_GRACE_S) -> dict[str, Any]:
    """Run one component benchmark as a child in its own session, under a hard cap.

    Its result is the JSON object on its last stdout line plus ``wall_s``. Anything that
    keeps it from one (timeout, no JSON) becomes an ``error`` entry: one benchmark must
    not stop the suite. Every process the child left running is stopped before return.
    Output goes to temp files, not pipes, so that a stray holding them open cannot keep
    the run waiting.
    """
    token = uuid.uuid4().hex  # inherited by what the child starts: finds its strays
    t0 = time.perf_counter()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(argv, cwd=ROOT, env={**os.environ, TOKEN_VAR: token},
                                stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                start_new_session=True)
        try:
            timed_out = _wait(proc, timeout, grace)
        finally:  # also when interrupted (Ctrl-C, an enclosing deadline)
            _signal_group(proc, signal.SIGKILL)
            proc.wait()
            left = end_family(proc.pid, token)
        stdout, stderr = _text(out), _text(err)
    result: dict[str, Any] = (
        {"error": f"timed out after {timeout:g} s, killed{_why(stderr)}"} if timed_out
        else component_result(proc.returncode, stdout, stderr))
    if left:
        result["left_running"] = left
    result["wall_s"] = time.perf_counter() - t0
    return result


def _wait(proc: subprocess.Popen[bytes], timeout: float, grace: float) -> bool:
    """Whether the child outlived ``timeout``. Then its group gets SIGTERM and ``grace``
    seconds to clean up (the caller's SIGKILL follows)."""
    try:
        proc.wait(timeout)
        return False
    except subprocess.TimeoutExpired:
        _signal_group(proc, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(grace)
    return True


def _text(f: Any) -> str:
    f.seek(0)
    return str(f.read().decode(errors="replace"))


def _signal_group(proc: subprocess.Popen[bytes], sig: int) -> None:
    """Signal the child's process group while the child is unreaped: until then the
    group id is certainly its own, never a reused one."""
    if proc.returncode is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, sig)


def end_family(pgid: int, token: str, grace: float = 2.0) -> list[int]:
    """Stop what a component run left: processes in its group ``pgid``, carrying its
    ``token``, or descending from one of those (a daemon's apps). SIGTERM, then SIGKILL
    after ``grace``. Returns their pids."""
    family = _family(pgid, token)
    for p in family:
        with contextlib.suppress(psutil.Error):
            p.terminate()
    alive = _wait_gone(family, grace)
    late = {p.pid: p for p in [*alive, *_family(pgid, token)]}  # started meanwhile
    for p in late.values():
        with contextlib.suppress(psutil.Error):
            p.kill()
    _wait_gone(list(late.values()), grace)
    return sorted({p.pid for p in family} | set(late))


def _wait_gone(procs: list[psutil.Process], timeout: float) -> list[psutil.Process]:
    """Wait until every process has exited; returns those still running. An orphan
    nobody reaps stays a zombie, which counts as exited (psutil.wait_procs would wait)."""
    deadline = time.monotonic() + timeout
    alive = [p for p in procs if running(p)]
    while alive and time.monotonic() < deadline:
        time.sleep(0.02)
        alive = [p for p in alive if running(p)]
    return alive


def _family(pgid: int, token: str) -> list[psutil.Process]:
    """Live processes in group ``pgid`` or carrying ``token``, and their descendants."""
    roots = [p for p in psutil.process_iter() if p.pid != os.getpid() and running(p)
             and (_pgid(p) == pgid or has_token(p, token))]
    found = {p.pid: p for p in roots}
    for root in roots:
        with contextlib.suppress(psutil.Error):
            found.update((c.pid, c) for c in root.children(recursive=True))
    found.pop(os.getpid(), None)
    return list(found.values())


def _pgid(p: psutil.Process) -> int | None:
    try:
        return os.getpgid(p.pid)
    except OSError:
        return None


def component_result(code: int | None, out: str, err: str) -> dict[str, Any]:
    """The JSON object on the last non-empty stdout line, with the exit status.

    A non-zero status with that object is still a measurement (bench/handoff.py exits 1
    when an app restarted or a line was lost, and the Targets judge those counts);
    without it, it is an error.
    """
    lines = [ln for ln in out.splitlines() if ln.strip()]
    try:
        data = json.loads(lines[-1]) if lines else None
    except ValueError:
        data = None
    if not isinstance(data, dict):
        what = "no output" if not lines else "no JSON object on its last stdout line"
        return {"error": f"exit status {code}, {what}{_why(err)}"}
    return {**data, "exit_status": code}


def _why(err: str) -> str:
    """'; stderr: <its last non-empty line>' (shortened), or '' when it is empty."""
    lines = [ln.strip() for ln in err.splitlines() if ln.strip()]
    return f"; stderr: {lines[-1][:200]}" if lines else ""


def run_components(cfg: dict[str, Any], raw: dict[str, list[dict[str, Any]]]) -> None:
    """Each component benchmark of ``cfg`` once, appended to ``raw[name]``."""
    for name, spec in cfg["components"].items():
        print(f"  components {name} ...", flush=True)
        argv = [sys.executable, str(ROOT / spec["script"]), *spec["args"]]
        out = run_component(argv, cfg["component_timeout"])
        raw.setdefault(name, []).append(out)
        print(f"  components {name}: {_brief(out)}", flush=True)


def _brief(out: dict[str, Any]) -> str:
    if "error" in out:
        return f"error: {out['error']}"
    return ", ".join(f"{k} {v:g}" if isinstance(v, float) else f"{k} {v}"
                     for k, v in out.items())


# per-run entries of a component's result that are bookkeeping, not figures
COMPONENT_EXTRAS = ("wall_s", "exit_status", "left_running", "per_run", "error")


def component_summary(components: dict[str, Any]) -> dict[str, Any]:
    """'component_<benchmark>_<figure>': each component figure's median (the benchmark
    named: both report log_lines_lost), and '..._error' for one that failed."""
    out: dict[str, Any] = {}
    for name, data in components.items():
        for key, v in data.items():
            if key in COMPONENT_EXTRAS or key.endswith(aggregate.STAT_SUFFIXES):
                continue
            out[f"component_{name}_{key}"] = round(v, 3) if isinstance(v, float) else v
        if "error" in data:
            out[f"component_{name}_error"] = data["error"]
    return out

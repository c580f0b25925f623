"""tenure's benchmark suite: tenure and its peers, same machine, same run.

Usage: python bench/suite.py [--quick] [--only supervisord,circus,pm2] [--n 50,200]
                             [--repeat K] [--render] [--render-only] [--allow-errors]
Installs the peers (bench/peers/install.py), runs every scenario for every registered
adapter K times (the repetitions interleave the supervisors, so that a change in machine
load hits all of them), and keeps the median of each figure with its min, max and spread
(bench/aggregate.py). When tenure is among them, each repetition also runs tenure's
component benchmarks (bench/owner.py, bench/handoff.py) once, after the supervisors.
Writes bench/results/<timestamp>.json and bench/results/latest.json, and with --render
docs/benchmarks.md and docs/bench/*.png. When a scenario or a component benchmark
failed, only the timestamped file is written and the exit status is 1, unless
--allow-errors. The last line printed is one JSON object with the key figures per
supervisor.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import functools
import importlib
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

try:
    import psutil
except ImportError:  # run from a Python without psutil: use the peers venv
    from bench.peers import install as _install

    _install.ensure()
    os.execv(str(_install.peer_python()), [str(_install.peer_python()), *sys.argv])

from bench import aggregate  # noqa: E402
from bench.components import component_summary, run_components  # noqa: E402
from bench.peers import install  # noqa: E402
from bench.peers.base import (  # noqa: E402
    ScenarioTimeout,
    Supervisor,
    forked_not_execd,
    gone,
    remove_tree,
    timed_run,
    tree_rss,
    wait_until,
    write_log_writer,
    writer_times,
)

RESULTS = ROOT / "bench" / "results"

# Adapter registry: name -> "module:Class". The peers are registered here.
# >>> TENURE REGISTRATION POINT: add tenure's adapter (a bench.peers.base.Supervisor
# >>> subclass), e.g. ADAPTERS["tenure"] = "bench.tenure_adapter:Tenure". Ratio
# >>> columns tenure/peer appear in docs/benchmarks.md as soon as "tenure" has results.
ADAPTERS: dict[str, str] = {
    "tenure": "bench.tenure_adapter:Tenure",
    "supervisord": "bench.peers.supervisord:Supervisord",
    "circus": "bench.peers.circus:Circus",
    "pm2": "bench.peers.pm2:Pm2",
}


def _components(spawn: int, lines: int, idle: int, apps: int, handoffs: int
                ) -> dict[str, dict[str, Any]]:
    """tenure's component benchmarks: name -> script (relative to the checkout) and its
    arguments; each runs once per repetition under the config's "component_timeout"."""
    return {"owner": {"script": "bench/owner.py", "args": [
                "--spawn", str(spawn), "--lines", str(lines), "--idle", str(idle)]},
            "handoff": {"script": "bench/handoff.py", "args": [
                "--apps", str(apps), "--handoffs", str(handoffs)]}}


FULL = {"ns": [50, 200], "status_runs": 20, "restart_repeats": 5, "log_lines": 1_000_000,
        "scenario_timeout": 120.0, "settle_s": 2.0, "repeat": 5,
        "components": _components(200, 1_000_000, 1000, 200, 10), "component_timeout": 600.0}
QUICK = {"ns": [10], "status_runs": 10, "restart_repeats": 3, "log_lines": 100_000,
         "scenario_timeout": 60.0, "settle_s": 1.0, "repeat": 1,
         "components": _components(50, 100_000, 100, 20, 3), "component_timeout": 600.0}

_ACTIVE: list[Supervisor] = []


def load_adapter(name: str) -> Supervisor:
    module, cls = ADAPTERS[name].split(":")
    sup: Supervisor = getattr(importlib.import_module(module), cls)()
    _ACTIVE.append(sup)
    return sup


def stop_active() -> None:
    """Stop every adapter still loaded (after an interrupted session, say)."""
    while _ACTIVE:
        _ACTIVE.pop().stop()


def unload_adapter(sup: Supervisor) -> None:
    """Stop ``sup`` and forget it, unless a signal's handler (_on_signal) has already."""
    if sup in _ACTIVE:
        sup.stop()
    with contextlib.suppress(ValueError):   # the handler may have taken it meanwhile
        _ACTIVE.remove(sup)


def _on_signal(signum: int, _frame: object) -> None:
    stop_active()
    raise SystemExit(128 + signum)


class HardTimeout(BaseException):
    """Raised by SIGALRM; a BaseException so that no polling loop swallows it."""


class DeadlinePassed(BaseException):
    """An enclosing deadline (a whole test, say) ran out. run_scenario does not catch it:
    it ends the session instead of becoming one scenario's error."""


@contextlib.contextmanager
def bounded(seconds: float, what: str = "scenario",
            exc: type[BaseException] = HardTimeout) -> Iterator[None]:
    """Hard cap: SIGALRM raises ``exc`` after ``seconds``.

    Nests: inside a bound that runs out first this one changes nothing; otherwise the
    enclosing bound is re-armed with its remaining time on exit (at once if it is due).
    """
    outer = signal.getitimer(signal.ITIMER_REAL)[0]
    if outer and outer <= seconds:
        yield
        return

    def fire(_s: int, _f: object) -> None:
        raise exc(f"{what} exceeded {seconds:.0f} s")

    old = signal.signal(signal.SIGALRM, fire)
    t0 = time.monotonic()
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
        if outer:
            signal.setitimer(signal.ITIMER_REAL, max(outer - (time.monotonic() - t0), 1e-3))


def pctl(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def poll_all(sup: Supervisor, n: int, timeout: float) -> tuple[float, dict[str, int]]:
    """Seconds until the supervisor reports all n programs running with live pids."""
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < timeout:
        with contextlib.suppress(Exception):  # daemon not up yet / restarting
            running = sup.all_running()
            if len(running) == n and all(psutil.pid_exists(p) for p in running.values()):
                return time.perf_counter() - t0, running
        time.sleep(0.005)
    raise ScenarioTimeout(f"{sup.name}: not all {n} programs running after {timeout:.0f} s")


# -- scenarios --------------------------------------------------------------------------
def sc_start(sup: Supervisor, n: int, cfg: dict[str, Any]) -> dict[str, Any]:
    t0 = time.perf_counter()
    sup.start()
    cmd_s = time.perf_counter() - t0
    waited, _ = poll_all(sup, n, cfg["scenario_timeout"])
    return {"start_cmd_s": cmd_s, "all_running_s": cmd_s + waited}


MEMORY_SETTLE_S = 2.0
"""How long the memory scenario waits for forked programs to exec (forked_not_execd)."""


def sc_memory(sup: Supervisor, n: int, cfg: dict[str, Any]) -> dict[str, Any]:
    """The supervisor's own processes' RSS, once no program it forked is still a copy of
    it: a supervisor that calls a program running as soon as it has forked it had up to
    10 such copies here at times (201 MiB against its 19.9 MiB)."""
    t0 = time.perf_counter()
    pids = sup.own_pids()
    while forked_not_execd(pids[1:]) and time.perf_counter() - t0 < MEMORY_SETTLE_S:
        time.sleep(0.01)
        pids = sup.own_pids()
    return {"rss_mib": tree_rss(pids) / 2**20, "processes": len(pids), "pids": pids,
            "settled_s": time.perf_counter() - t0}


def sc_status(sup: Supervisor, n: int, cfg: dict[str, Any]) -> dict[str, Any]:
    argv, env, times, codes = sup.status_cli(), sup.cli_env(), [], set()
    for _ in range(cfg["status_runs"]):
        elapsed, code = timed_run(argv, env)
        times.append(elapsed)
        codes.add(code)
    return {"median_ms": 1000 * statistics.median(times), "p90_ms": 1000 * pctl(times, 0.9),
            "runs": len(times), "exit_codes": sorted(codes)}


def sc_restart(sup: Supervisor, n: int, cfg: dict[str, Any]) -> dict[str, Any]:
    samples = []
    for i in range(cfg["restart_repeats"]):
        poll_all(sup, n, cfg["scenario_timeout"])
        name = sup.names[(i * 7) % n]
        samples.append(sup.kill_one_and_wait_restart(name, cfg["scenario_timeout"]))
    return {"median_ms": 1000 * statistics.median(samples),
            "max_ms": 1000 * max(samples), "samples_ms": [1000 * s for s in samples]}


def sc_restart_cmd(sup: Supervisor, n: int, cfg: dict[str, Any]) -> dict[str, Any]:
    """The documented restart of one program: seconds until its new pid is reported (the
    old one gone), and how many of the other programs' pids changed (should be none)."""
    _, before = poll_all(sup, n, cfg["scenario_timeout"])
    name, old = sup.names[-1], before[sup.names[-1]]
    t0 = time.perf_counter()
    sup.restart_program(name, cfg["scenario_timeout"])
    cmd_s = time.perf_counter() - t0

    def replaced() -> bool:
        new = sup.pid_of(name)
        return new is not None and new != old and psutil.pid_exists(new) and gone(old)

    wait_until(replaced, cfg["scenario_timeout"], 0.002, f"{name} restarted by command")
    new_pid_s = time.perf_counter() - t0
    _, after = poll_all(sup, n, cfg["scenario_timeout"])
    changed = sum(1 for k, pid in before.items() if k != name and after.get(k) != pid)
    return {"cmd_s": cmd_s, "new_pid_s": new_pid_s, "program": name,
            "pid_changed": after[name] != old, "others_changed": changed}


def sc_replace(sup: Supervisor, n: int, cfg: dict[str, Any]) -> dict[str, Any]:
    _, before = poll_all(sup, n, cfg["scenario_timeout"])
    daemon_before = sup.own_pids()[:1]
    t0 = time.perf_counter()
    sup.replace_control_plane()
    cmd_s = time.perf_counter() - t0
    since, after = _settled(sup, n, t0, cfg)
    changed = sum(1 for k, pid in before.items() if after.get(k) != pid)
    return {"cmd_s": cmd_s, "all_running_again_s": since, "pids_changed": changed,
            "programs": n, "daemon_pid_changed": sup.own_pids()[:1] != daemon_before}


def _settled(sup: Supervisor, n: int, t0: float,
             cfg: dict[str, Any]) -> tuple[float, dict[str, int]]:
    """Poll until the full running set has been unchanged for settle_s seconds.

    Returns (seconds from t0 to the start of that stable state, the state).
    """
    deadline = t0 + cfg["scenario_timeout"]
    stable_since, last = 0.0, None
    while time.perf_counter() < deadline:
        try:
            now = sup.all_running()
        except Exception:  # daemon restarting
            now = {}
        ok = len(now) == n and all(psutil.pid_exists(p) for p in now.values())
        if not ok or now != last:
            stable_since, last = time.perf_counter(), (now if ok else None)
        elif time.perf_counter() - stable_since >= cfg["settle_s"]:
            return stable_since - t0, now
        time.sleep(0.01)
    raise ScenarioTimeout(f"{sup.name}: programs not back after replacement")


def sc_logs(sup: Supervisor, workdir: Path, cfg: dict[str, Any]) -> dict[str, Any]:
    """One program writes cfg['log_lines'] lines; lines/s from its first line to the last
    line on disk (wall clock), and lines lost once it exited and the file stopped growing."""
    lines = cfg["log_lines"]
    sup.setup_logs(workdir, lines)
    t0 = time.time()
    sup.start()
    last = _wait_log_complete(sup, sup.log_expected(lines), cfg["scenario_timeout"])
    captured = sup.log_lines()
    times = writer_times(workdir)
    rate = captured / (last - times[0]) if times and last and last > times[0] else None
    return {"lines": lines, "captured": captured, "lost": lines - captured,
            "lines_per_s": rate, "writer_s": (times[1] - times[0]) if times else None,
            "writer_started_s": (times[0] - t0) if times else None,
            "all_captured_s": (last - t0) if last else None,
            "files": [str(f) for f in sup.log_files()]}


def _wait_log_complete(sup: Supervisor, expected: int, timeout: float) -> float | None:
    """Poll the log files until they hold ``expected`` bytes, or the program exited and
    nothing more arrived for 5 s. Returns the wall-clock time of the last growth."""
    size, last, exited_at = 0, None, None
    t0 = time.time()
    while time.time() - t0 < timeout:
        now, grown = time.time(), sup.log_captured()
        if grown > size:
            last, size = now, grown
        if size >= expected:
            break
        if exited_at is None:
            with contextlib.suppress(Exception):
                exited_at = now if sup.log_program_exited() else None
        elif now - max(exited_at, last or exited_at) > 5.0:
            break  # exited and nothing more flushed for 5 s: the rest is lost
        time.sleep(0.005)
    return last


def writer_baseline(workdir: Path, lines: int, runs: int = 3) -> float:
    """Best lines/s of the log writer read straight from a pipe (same definition as logs)."""
    return max(_writer_once(workdir, lines) for _ in range(runs))


def _writer_once(workdir: Path, lines: int) -> float:
    argv = write_log_writer(workdir, lines)
    with subprocess.Popen(argv, stdout=subprocess.PIPE) as proc:
        assert proc.stdout is not None
        last, count = 0.0, 0
        while chunk := os.read(proc.stdout.fileno(), 1 << 20):
            last, count = time.time(), count + chunk.count(b"\n")
        proc.wait(timeout=120)
    times = writer_times(workdir)
    assert times is not None and count == lines
    return count / (last - times[0])


# -- orchestration ----------------------------------------------------------------------
SESSION: list[tuple[str, Callable[[Supervisor, int, dict[str, Any]], dict[str, Any]]]] = [
    ("start", sc_start), ("memory", sc_memory), ("status", sc_status),
    ("restart", sc_restart), ("restart_cmd", sc_restart_cmd), ("replace", sc_replace),
]


def run_scenario(fn: Callable[[], dict[str, Any]], timeout: float) -> dict[str, Any]:
    """Run one scenario under a hard time cap; any failure becomes an ``error`` entry."""
    t0 = time.perf_counter()
    try:
        with bounded(timeout + 30):
            out = fn()
    except (Exception, HardTimeout) as exc:  # one failing scenario must not stop the suite
        out = {"error": f"{type(exc).__name__}: {exc}"}
    out["scenario_wall_s"] = time.perf_counter() - t0
    return out


def run_session(name: str, n: int, tmp: Path, cfg: dict[str, Any]) -> dict[str, Any]:
    """One supervisor with n programs: start, memory, status, restart (kill -9 and by
    command), replace."""
    sup = load_adapter(name)
    workdir = tmp / f"{name}-{n}"
    workdir.mkdir()  # removed when the session ends: the next repetition reuses the name
    out: dict[str, Any] = {}
    try:
        sup.setup(workdir, n, [shutil.which("sleep") or "/bin/sleep", "100000"])
        for scenario, fn in SESSION:
            print(f"  {name} n={n} {scenario} ...", flush=True)
            out[scenario] = run_scenario(functools.partial(fn, sup, n, cfg),
                                         cfg["scenario_timeout"])
            if "error" in out[scenario] and scenario == "start":
                break
    finally:
        unload_adapter(sup)
        remove_tree(workdir)
    out["commands"] = dict(sup.commands)
    out["stop"] = dict(sup.stop_report)
    return out


def run_logs(name: str, tmp: Path, cfg: dict[str, Any]) -> dict[str, Any]:
    sup = load_adapter(name)
    workdir = tmp / f"{name}-logs"
    workdir.mkdir()
    print(f"  {name} logs ...", flush=True)
    try:
        out = run_scenario(lambda: sc_logs(sup, workdir, cfg), cfg["scenario_timeout"])
    finally:
        unload_adapter(sup)
        remove_tree(workdir)
    out["commands"] = dict(sup.commands)
    return out


def machine() -> dict[str, Any]:
    def cmd(argv: list[str]) -> str:
        try:
            return subprocess.run(argv, capture_output=True, text=True, timeout=30).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return "unavailable"

    model = next((ln.split(":", 1)[1].strip() for ln in
                  Path("/proc/cpuinfo").read_text().splitlines()
                  if ln.startswith("model name")), "unknown")
    return {"cpus": os.cpu_count(), "cpu_model": model,
            "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
            "kernel": platform.release(), "os": cmd(["sh", "-c", ". /etc/os-release; "
                                                     "echo $PRETTY_NAME"]),
            "python": platform.python_version(), "node": cmd(["node", "--version"]),
            "load_avg_at_start": os.getloadavg()}


def commit() -> dict[str, Any]:
    """The checkout being measured: HEAD and whether tracked files differ from it."""
    def git(*args: str) -> str:
        try:
            return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True,
                                  text=True, timeout=30).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""

    return {"sha": git("rev-parse", "HEAD") or "unknown",
            "dirty": bool(git("status", "--porcelain", "--untracked-files=no"))}


def run_repetition(names: list[str], tmp: Path, cfg: dict[str, Any],
                   raw: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Every supervisor once (sessions for each N, then logs), then with tenure its
    component benchmarks, appended to ``raw``; returns the repetition's writer baseline,
    load average and wall time."""
    t0, load = time.perf_counter(), os.getloadavg()
    baseline = writer_baseline(tmp, cfg["log_lines"])
    for name in names:
        for n in cfg["ns"]:
            raw[name]["sessions"][str(n)].append(run_session(name, n, tmp, cfg))
        raw[name]["logs"].append(run_logs(name, tmp, cfg))
    if "tenure" in names:
        run_components(cfg, raw["tenure"].setdefault("components", {}))
    return {"load_avg_at_start": load, "log_writer_baseline_lines_per_s": baseline,
            "wall_s": time.perf_counter() - t0}


def run_all(names: list[str], cfg: dict[str, Any]) -> dict[str, Any]:
    versions = install.ensure()
    result: dict[str, Any] = {"machine": machine(), "commit": commit(), "config": cfg,
                              "installed": versions, "argv": sys.argv, "supervisors": {}}
    t_all = time.perf_counter()
    raw: dict[str, dict[str, Any]] = {
        name: {"sessions": {str(n): [] for n in cfg["ns"]}, "logs": []} for name in names}
    reps: list[dict[str, Any]] = []
    tmp = Path(tempfile.mkdtemp(prefix="tb-"))  # short: socket paths must fit 108 bytes
    try:
        for i in range(cfg["repeat"]):
            print(f"repetition {i + 1} of {cfg['repeat']}", flush=True)
            reps.append(run_repetition(names, tmp, cfg, raw))
    finally:
        stop_active()
        remove_tree(tmp)
    result["machine"]["load_avg_at_end"] = os.getloadavg()
    result["repetitions"] = reps
    result.update(aggregate.merge_key("log_writer_baseline_lines_per_s",
                                      [r["log_writer_baseline_lines_per_s"] for r in reps]))
    for name in names:
        result["supervisors"][name] = {
            "version": load_version(name),
            "sessions": {n: aggregate.merge_session(runs)
                         for n, runs in raw[name]["sessions"].items()},
            "logs": aggregate.merge_logs(raw[name]["logs"])}
    if "tenure" in names:
        result["components"] = aggregate.merge_components(raw["tenure"].get("components", {}))
    result["ratios"], result["ratio_best_peer"] = aggregate.ratios(
        result["supervisors"], [str(n) for n in cfg["ns"]])
    result["total_wall_s"] = time.perf_counter() - t_all
    return result


def load_version(name: str) -> str:
    sup = load_adapter(name)
    _ACTIVE.remove(sup)
    return sup.version


def summary(result: dict[str, Any]) -> dict[str, dict[str, Any]]:
    def rnd(v: Any, k: int = 3) -> Any:
        return round(v, k) if isinstance(v, float) else v

    out: dict[str, dict[str, Any]] = {}
    for name, entry in result["supervisors"].items():
        s: dict[str, Any] = {}
        for n, sess in entry["sessions"].items():
            s[f"start_s_{n}"] = rnd(sess.get("start", {}).get("all_running_s"))
            s[f"status_ms_{n}"] = rnd(sess.get("status", {}).get("median_ms"), 1)
            s[f"restart_ms_{n}"] = rnd(sess.get("restart", {}).get("median_ms"), 1)
            s[f"replace_changed_{n}"] = sess.get("replace", {}).get("pids_changed")
            s[f"replace_s_{n}"] = rnd(sess.get("replace", {}).get("all_running_again_s"))
            s[f"rss_mib_{n}"] = rnd(sess.get("memory", {}).get("rss_mib"), 1)
        s["log_lines_per_s"] = rnd(entry["logs"].get("lines_per_s"), 0)
        s["log_lost"] = entry["logs"].get("lost")
        if name == "tenure":
            for n, row in result.get("ratios", {}).items():
                s.update({f"{k}_{n}": rnd(v) for k, v in row.items()})
            s.update(component_summary(result.get("components", {})))
        out[name] = s
    return out


def save(result: dict[str, Any], publish: bool) -> Path:
    """Write bench/results/<timestamp>.json, and latest.json too when ``publish``.

    Paths inside this checkout are written relative to it (the commands in the report
    read the same on every machine).
    """
    RESULTS.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    path = RESULTS / f"{stamp}.json"
    text = json.dumps(result, indent=1, default=str).replace(str(ROOT) + "/", "") + "\n"
    path.write_text(text)
    if publish:
        (RESULTS / "latest.json").write_text(text)
    return path


def render(path: Path) -> None:
    script = ROOT / "bench" / "peers" / "render.py"
    subprocess.run([str(install.peer_python()), str(script), str(path), str(ROOT / "docs")],
                   check=True, timeout=300)


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description="tenure benchmark suite (tenure and peers)")
    ap.add_argument("--quick", action="store_true",
                    help="N=10, fewer repeats, 100k log lines, one repetition")
    ap.add_argument("--only", default=",".join(ADAPTERS), help="comma-separated adapters")
    ap.add_argument("--n", help="comma-separated program counts (default 50,200)")
    ap.add_argument("--repeat", type=int, metavar="K",
                    help="run everything K times; figures are medians (default 5, --quick 1)")
    ap.add_argument("--render", action="store_true", help="write docs/benchmarks.md + plots")
    ap.add_argument("--render-only", action="store_true", help="render latest.json, no run")
    ap.add_argument("--allow-errors", action="store_true",
                    help="publish (latest.json, --render) even when a scenario failed")
    return ap.parse_args()


def config(args: argparse.Namespace) -> dict[str, Any]:
    cfg = dict(QUICK if args.quick else FULL, quick=args.quick,
               spread_flag=aggregate.SPREAD_FLAG)
    if args.n:
        cfg["ns"] = [int(x) for x in args.n.split(",")]
    if args.repeat is not None:
        if args.repeat < 1:
            raise SystemExit("--repeat must be at least 1")
        cfg["repeat"] = args.repeat
    return cfg


def main() -> None:
    args = parse_args()
    if args.render_only:
        render(RESULTS / "latest.json")
        print(json.dumps(summary(json.loads((RESULTS / "latest.json").read_text()))))
        return
    names = [n for n in args.only.split(",") if n]
    unknown = [n for n in names if n not in ADAPTERS]
    if unknown:
        raise SystemExit(f"unknown adapters: {unknown}; known: {sorted(ADAPTERS)}")
    cfg = config(args)
    atexit.register(stop_active)
    signal.signal(signal.SIGTERM, _on_signal)
    result = run_all(names, cfg)
    failed = aggregate.failures(result["supervisors"], result.get("components"))
    publish = not failed or args.allow_errors
    path = save(result, publish)
    print(f"results: {path} (total {result['total_wall_s']:.1f} s)", flush=True)
    if failed:
        print("scenarios failed:\n  " + "\n  ".join(failed), file=sys.stderr, flush=True)
    if not publish:
        raise SystemExit(f"not published (latest.json, docs): {len(failed)} failures; "
                         f"the results are in {path}; --allow-errors publishes them")
    if args.render:
        render(path)
    print(json.dumps(summary(result)))


if __name__ == "__main__":
    main()

"""Render a suite result JSON into docs/benchmarks.md and docs/bench/*.png.

Runs under the peers venv (it has matplotlib): bench/.peers/py/bin/python
bench/peers/render.py RESULT.json DOCS_DIR. Every number comes from RESULT.json.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

REPRO = "./dev bench    # = .venv/bin/python bench/suite.py --render, after setting up .venv"

# (scenario, key, label, unit, plotted)
METRICS = [
    ("start", "start_cmd_s", "start: command returned", "s", False),
    ("start", "all_running_s", "start: command to all running", "s", True),
    ("status", "median_ms", "status CLI, median", "ms", True),
    ("status", "p90_ms", "status CLI, p90", "ms", True),
    ("restart", "median_ms", "kill -9 to new pid reported, median", "ms", True),
    ("replace", "all_running_again_s", "control-plane replacement: all running again", "s",
     True),
    ("replace", "cmd_s", "control-plane replacement: command returned", "s", False),
    ("replace", "pids_changed", "control-plane replacement: program pids changed", "", True),
    ("replace", "daemon_pid_changed", "control-plane replacement: daemon pid changed", "",
     False),
    ("memory", "rss_mib", "supervisor RSS (own processes)", "MiB", True),
]


def fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.3g}" if abs(v) < 10 else f"{v:.1f}"
    return str(v)


def value(sess: dict[str, Any], scenario: str, key: str) -> Any:
    data = sess.get(scenario, {})
    return data.get("error", "error") if "error" in data else data.get(key)


def session_table(res: dict[str, Any], n: str) -> list[str]:
    sups = res["supervisors"]
    peers = [s for s in sups if s != "tenure"]
    has_tenure = "tenure" in sups and n in sups["tenure"]["sessions"]
    cols = list(sups) + ([f"tenure/{p}" for p in peers] if has_tenure else [])
    lines = [f"### {n} programs", "", "| metric | " + " | ".join(cols) + " |",
             "|---|" + "---:|" * len(cols)]
    for scenario, key, label, unit, _ in METRICS:
        row = [value(sups[s]["sessions"].get(n, {}), scenario, key) for s in sups]
        if has_tenure:
            t = value(sups["tenure"]["sessions"][n], scenario, key)
            for p in peers:
                v = value(sups[p]["sessions"].get(n, {}), scenario, key)
                ok = isinstance(t, int | float) and isinstance(v, int | float) and v
                row.append(f"{t / v:.2f}x" if ok else None)
        name = f"{label} ({unit})" if unit else label
        lines.append(f"| {name} | " + " | ".join(fmt(v) for v in row) + " |")
    return [*lines, ""]


def logs_table(res: dict[str, Any]) -> list[str]:
    sups = res["supervisors"]
    lines = ["| supervisor | lines written | captured | lost | lines/s captured |"
             " writer ran (s) | all captured after start command (s) |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for name, entry in sups.items():
        lg = entry["logs"]
        if "error" in lg:
            lines.append(f"| {name} | error: {lg['error']} | | | | | |")
            continue
        lines.append(f"| {name} | {lg['lines']:,} | {lg['captured']:,} | {lg['lost']:,} | "
                     f"{fmt(lg['lines_per_s'])} | {fmt(lg['writer_s'])} | "
                     f"{fmt(lg['all_captured_s'])} |")
    base = res.get("log_writer_baseline_lines_per_s")
    lines += ["", f"The writer alone, read straight from a pipe by the driver (best of 3, "
              f"same definition): {fmt(base)} lines/s. Capture rates are bounded by the "
              "writer and move with machine load. 'writer ran' is the writer's own run time "
              "under the supervisor: longer than alone means the supervisor read its pipe "
              "slower than the writer could write (back-pressure).", ""]
    return lines


def commands_section(res: dict[str, Any]) -> list[str]:
    lines = ["## Exact commands", "",
             "`W` is the run's private temp directory (`/tmp/tb-*/<supervisor>-<N>`).", ""]
    for name, entry in res["supervisors"].items():
        sess: dict[str, Any] = next(iter(entry["sessions"].values()), {})
        cmds = dict(sess.get("commands", {}))
        lines.append(f"**{name} {entry['version']}**")
        lines.append("")
        for key, cmd in cmds.items():
            lines.append(f"- {key}: `` {_shorten(cmd)} ``")
        lines.append("")
    return lines


def _shorten(cmd: str) -> str:
    import re
    return re.sub(r"/tmp/tb-[^/ ]+/[^/ ]+", "W", cmd).replace(str(Path.cwd()) + "/", "")


def header(res: dict[str, Any]) -> list[str]:
    m, cfg = res["machine"], res["config"]
    vers = ", ".join(f"{k} {v['version']}" for k, v in res["supervisors"].items())
    return [
        "# Benchmarks: tenure and its peers", "",
        "Generated by `bench/peers/render.py` from `bench/results/latest.json` "
        f"(run started with `{' '.join(res['argv'])}`). Do not edit by hand.", "",
        "Reproduce (installs the peers into `bench/.peers/`, runs, renders):", "",
        f"```\n{REPRO}\n```", "",
        "## Machine", "",
        f"- {m['cpus']} CPUs ({m['cpu_model']}), {m['memory_gib']} GiB RAM",
        f"- {m['os']}, kernel {m['kernel']}",
        f"- Python {m['python']}, Node {m['node']}",
        "- load average when the run started: "
        + ", ".join(f"{x:.2f}" for x in m["load_avg_at_start"]),
        f"- whole run: {res['total_wall_s']:.0f} s; program counts {cfg['ns']}, "
        f"{cfg['status_runs']} status runs, {cfg['restart_repeats']} kills per N, "
        f"{cfg['log_lines']:,} log lines", "",
        f"Versions: {vers}.", "",
    ]


METHOD = """## What each scenario measures

Programs are `sleep 100000`, one process per program, named p000…; each supervisor
gets the same programs in its own config, its control socket in a private temp dir.

- **start**: from running the start command to the supervisor reporting all N programs
  running (supervisord `RUNNING` with `startsecs=0`, circus watcher pids, pm2 `online`),
  polled every 5 ms through each supervisor's own API.
- **status**: wall time of the CLI status command, run repeatedly.
- **restart**: `kill -9` of one program's pid, then time until the supervisor reports a new
  pid for it (polled every 2 ms through its API); median over several programs.
- **control-plane replacement**: the documented way to restart the daemon
  (`supervisorctl reload`, `circusctl restart`, `pm2 update`); then how many of the N
  program pids changed and the time until all N run again (a state is accepted once it
  has been unchanged for the settle time, which is not included).
- **memory**: summed RSS of the supervisor's own processes (daemon and its non-program
  children), programs excluded, after N programs started.
- **logs**: one program writes fixed-width lines to stdout as fast as it can and exits;
  lines/s is lines captured divided by the wall time from the writer's first line to the
  last line reaching the supervisor's log file; lost = written - captured after the writer
  exited and the file stopped growing (bounded wait).

Peer defaults worth knowing: circus checks its watchers every `check_delay` (default 5 s),
which bounds how soon it notices a killed process; supervisord moves a process from
STARTING to RUNNING on its next main-loop tick; pm2 runs a Node daemon.
"""


def plots(res: dict[str, Any], outdir: Path) -> list[str]:
    outdir.mkdir(parents=True, exist_ok=True)
    sups = res["supervisors"]
    ns = [str(n) for n in res["config"]["ns"]]
    names = []
    for scenario, key, label, unit, plotted in METRICS:
        if not plotted:
            continue
        fig, ax = plt.subplots(figsize=(6, 3.2))
        width = 0.8 / max(1, len(sups))
        seen: list[float] = []
        for i, (name, entry) in enumerate(sups.items()):
            vals = [value(entry["sessions"].get(n, {}), scenario, key) for n in ns]
            vals = [v if isinstance(v, int | float) else 0 for v in vals]
            bars = ax.bar([j + i * width for j in range(len(ns))], vals, width, label=name)
            ax.bar_label(bars, labels=[fmt(float(v)) for v in vals], fontsize=7)
            seen += [v for v in vals if v > 0]
        if seen and max(seen) / min(seen) > 50:
            ax.set_yscale("log")
        ax.set_xticks([j + width * (len(sups) - 1) / 2 for j in range(len(ns))],
                      [f"N={n}" for n in ns])
        ax.set_title(label)
        ax.set_ylabel(unit)
        ax.legend(fontsize=8)
        fig.tight_layout()
        fname = f"{scenario}-{key}.png".replace("_", "-")
        fig.savefig(outdir / fname, dpi=100)
        plt.close(fig)
        names.append(fname)
    names.append(_logs_plot(res, outdir))
    return names


def _logs_plot(res: dict[str, Any], outdir: Path) -> str:
    fig, ax = plt.subplots(figsize=(6, 3.2))
    sups = res["supervisors"]
    vals = [sups[s]["logs"].get("lines_per_s") or 0 for s in sups]
    ax.bar(list(sups), vals)
    ax.set_title("log lines captured per second")
    ax.set_ylabel("lines/s")
    fig.tight_layout()
    fig.savefig(outdir / "logs-lines-per-s.png", dpi=100)
    plt.close(fig)
    return "logs-lines-per-s.png"


def render(res: dict[str, Any], docs: Path) -> None:
    lines = header(res)
    lines += ["## Results", ""]
    for n in (str(n) for n in res["config"]["ns"]):
        lines += session_table(res, n)
    lines += ["### Logs", "", *logs_table(res)]
    lines += ["## Plots", ""]
    lines += [*(f"![{p}](bench/{p})" for p in plots(res, docs / "bench")), ""]
    lines += [METHOD]
    lines += commands_section(res)
    (docs / "benchmarks.md").write_text("\n".join(lines).rstrip() + "\n")


def main() -> None:
    res = json.loads(Path(sys.argv[1]).read_text())
    render(res, Path(sys.argv[2]))
    print(f"rendered {Path(sys.argv[2]) / 'benchmarks.md'}")


if __name__ == "__main__":
    main()

"""The text of docs/benchmarks.md from a suite result (bench/results/*.json).

No plotting here (bench/peers/render.py draws the charts and writes the file), and only
the standard library, so that it runs in the peers venv and in the unit tests alike.
Every number comes from the result. A figure is its median over the run's repetitions;
its spread, (max - min) / median, follows in parentheses, and a spread wider than the
result's ``config.spread_flag`` is flagged with FLAG. The Targets section judges tenure's
ratios to the best peer, and the figures of its component benchmarks (bench/owner.py,
bench/handoff.py; the result's ``components``), against the tables in
bench/peers/targets.py. A result without ``components`` (older runs) says they were not
run.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.aggregate import RATIOS, SPREAD_FLAG, is_number
from bench.peers.targets import BEHIND, COMPONENT_TARGETS, TARGETS, Target

REPRO = "./dev bench    # = ./dev peers, then .venv/bin/python bench/suite.py --render"
FLAG = "⚠"

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


def repeats(res: dict[str, Any]) -> int:
    return int(res["config"].get("repeat", 1))


def flag_at(res: dict[str, Any]) -> float:
    return float(res["config"].get("spread_flag", SPREAD_FLAG))


def spread_note(data: dict[str, Any], key: str, limit: float, always: bool) -> str:
    """' (12%)', ' (41%) ⚠' or '' for the figure ``key`` of one merged scenario.

    ``always`` False leaves out a spread of 0 (counts that every run agreed on).
    """
    if "error" in data or not is_number(data.get(key)) or f"{key}_spread" not in data:
        return ""
    spread = data[f"{key}_spread"]
    if spread is None:  # median 0, runs differ
        return f" ({fmt(data.get(f'{key}_min'))} to {fmt(data.get(f'{key}_max'))}) {FLAG}"
    if not spread and not always:
        return ""
    return f" ({spread:.0%})" + (f" {FLAG}" if spread > limit else "")


def cell(data: dict[str, Any], key: str, res: dict[str, Any], always: bool = True) -> str:
    v = data.get("error", "error") if "error" in data else data.get(key)
    note = spread_note(data, key, flag_at(res), always) if repeats(res) > 1 else ""
    return fmt(v) + note


def flagged(res: dict[str, Any]) -> tuple[int, int]:
    """(figures flagged, figures with a spread) over the session, logs and component
    tables."""
    limit, notes = flag_at(res), []
    for entry in res["supervisors"].values():
        for sess in entry["sessions"].values():
            notes += [spread_note(sess.get(scenario, {}), key, limit, True)
                      for scenario, key, _label, unit, _ in METRICS if unit]
        notes += [spread_note(entry["logs"], key, limit, True) for key, _ in LOG_FIGURES]
    components = res.get("components", {})
    notes += [spread_note(components.get(bench, {}), key, limit, True)
              for bench, key, _label, _unit, worst in COMPONENT_FIGURES if not worst]
    notes = [n for n in notes if n]
    return sum(FLAG in n for n in notes), len(notes)


def session_table(res: dict[str, Any], n: str) -> list[str]:
    sups = res["supervisors"]
    peers = [s for s in sups if s != "tenure"]
    has_tenure = "tenure" in sups and n in sups["tenure"]["sessions"]
    cols = list(sups) + ([f"tenure/{p}" for p in peers] if has_tenure else [])
    lines = [f"### {n} programs", "", "| metric | " + " | ".join(cols) + " |",
             "|---|" + "---:|" * len(cols)]
    for scenario, key, label, unit, _ in METRICS:
        row = [cell(sups[s]["sessions"].get(n, {}).get(scenario, {}), key, res, bool(unit))
               for s in sups]
        if has_tenure:
            t = value(sups["tenure"]["sessions"][n], scenario, key)
            for p in peers:
                v = value(sups[p]["sessions"].get(n, {}), scenario, key)
                ok = is_number(t) and is_number(v) and v
                row.append(f"{t / v:.2f}x" if ok else "-")
        name = f"{label} ({unit})" if unit else label
        lines.append(f"| {name} | " + " | ".join(row) + " |")
    return [*lines, ""]


# logs figures shown with their spread: (key, label)
LOG_FIGURES = [("lines_per_s", "lines/s captured"), ("writer_s", "writer ran (s)"),
               ("all_captured_s", "all captured after start command (s)")]


def logs_table(res: dict[str, Any]) -> list[str]:
    sups, k = res["supervisors"], repeats(res)
    lost = "lost" if k == 1 else f"lost (worst of {k})"
    lines = [f"| supervisor | lines written | captured | {lost} | "
             + " | ".join(label for _, label in LOG_FIGURES) + " |",
             "|---|---:|---:|---:|" + "---:|" * len(LOG_FIGURES)]
    for name, entry in sups.items():
        lg = entry["logs"]
        if "error" in lg:
            lines.append(f"| {name} | error: {lg['error']} |" + " |" * (2 + len(LOG_FIGURES)))
            continue
        figures = " | ".join(cell(lg, key, res) for key, _ in LOG_FIGURES)
        lines.append(f"| {name} | {_count(lg['lines'])} | {_count(lg['captured'])} | "
                     f"{_count(lg.get('lost_max', lg['lost']))} | {figures} |")
    base = res.get("log_writer_baseline_lines_per_s")
    base_note = spread_note(res, "log_writer_baseline_lines_per_s", flag_at(res), True)
    lines += ["", f"The writer alone, read straight from a pipe by the driver (best of 3 "
              f"per repetition, same definition): {fmt(base)}{base_note if k > 1 else ''} "
              "lines/s. Capture rates are bounded by the writer and move with machine load. "
              "'writer ran' is the writer's own run time under the supervisor: longer than "
              "alone means the supervisor read its pipe slower than the writer could write "
              "(back-pressure).", ""]
    return lines


# tenure's component benchmarks: (benchmark, key of its JSON, label, unit, worst), where
# ``worst`` shows a count that must be 0 at its worst repetition (like lines lost)
COMPONENT_FIGURES = [
    ("owner", "spawn_per_s", "launches per second, one launch call after another",
     "launches/s", False),
    ("owner", "exit_event_p50_us", "kill -9 to exit event at a subscriber, p50", "us", False),
    ("owner", "exit_event_p99_us", "kill -9 to exit event at a subscriber, p99", "us", False),
    ("owner", "log_lines_per_s", "log lines committed per second", "lines/s", False),
    ("owner", "log_lines_lost", "log lines lost", "lines", True),
    ("owner", "owner_rss_mb_1000", "owner RSS with the idle apps", "MiB", False),
    ("owner", "wall_s", "benchmark wall time", "s", False),
    ("handoff", "pause_p50_ms", "control-plane pause, median", "ms", False),
    ("handoff", "pause_max_ms", "control-plane pause, max", "ms", False),
    ("handoff", "upgrade_call_p50_ms", "upgrade call, median", "ms", False),
    ("handoff", "app_restarts", "apps restarted", "apps", True),
    ("handoff", "log_lines_lost", "numbered log lines lost", "lines", True),
    ("handoff", "wall_s", "benchmark wall time", "s", False),
]


def components_section(res: dict[str, Any]) -> list[str]:
    """'### Component benchmarks': one table per benchmark, tenure only."""
    lines = ["### Component benchmarks", ""]
    components = res.get("components")
    if not components:
        return [*lines, "Not run in this result: the suite runs them when tenure is among "
                "the supervisors, and results older than them do not have them.", ""]
    lines += ["Tenure's own parts, each benchmark run once per repetition after the "
              "supervisors; no peer has these parts, so there are no ratios. Their targets "
              "are judged under Targets.", ""]
    specs = res["config"].get("components", {})
    for bench, data in components.items():
        lines += component_table(res, bench, data, specs.get(bench, {}))
    return lines


def component_table(res: dict[str, Any], bench: str, data: dict[str, Any],
                    spec: dict[str, Any]) -> list[str]:
    """One component benchmark: its command line, then its figures, or its error."""
    command = " ".join([spec.get("script", f"bench/{bench}.py"), *spec.get("args", [])])
    lines = [f"**{bench}** (`{command}`)", ""]
    if "error" in data:
        return [*lines, f"error: {data['error']}", ""]
    k = repeats(res)
    lines += ["| figure | unit | tenure |", "|---|---|---:|"]
    for b, key, label, unit, worst in COMPONENT_FIGURES:
        if b != bench:
            continue
        if worst:
            shown = _count(data.get(f"{key}_max", data.get(key)))
            label += f" (worst of {k})" if k > 1 else ""
        else:
            shown = _component_cell(data, key, res)
        lines.append(f"| {label} | {unit} | {shown} |")
    return [*lines, ""]


def _component_cell(data: dict[str, Any], key: str, res: dict[str, Any]) -> str:
    """``cell``, with thousands separators for whole numbers (the benchmarks round
    lines/s and microseconds to integers)."""
    v = data.get(key)
    if not is_number(v) or not isinstance(v, int):
        return cell(data, key, res)
    return _count(v) + (spread_note(data, key, flag_at(res), True) if repeats(res) > 1 else "")


def targets_intro() -> str:
    absolute = [t for t in TARGETS if t.at_most is None and t.at_least is None]
    return " ".join([
        "A ratio is tenure's median divided by the best peer's median in the same run at the "
        "same program count N; the best peer is the one with the lowest median (for log "
        "lines/s, the highest).",
        *(f"'{t.label}' is judged on tenure's own figures alone; its ratio is shown for "
          "information." for t in absolute),
        "Counts that must be 0 are judged on their worst repetition. Log capture runs one "
        "program whatever N, so it has one row. The targets, and the reasons listed under "
        "the table for those behind, are in `bench/peers/targets.py`.",
    ])


@dataclass(frozen=True)
class Judged:
    """One row of the Targets table: a target at one program count."""
    target: Target
    n: str  # shown in the table: a program count, or "any" for logs
    cells: list[str]
    verdict: str


def _figure(res: dict[str, Any], sup: str | None, n: str, scenario: str, key: str,
            worst: bool = False) -> float | None:
    """``sup``'s figure ``key`` (its worst run's with ``worst``); None if missing or failed."""
    entry = res["supervisors"].get(sup) if sup else None
    if entry is None:
        return None
    data = entry["logs"] if scenario == "logs" else entry["sessions"].get(n, {}).get(scenario)
    return _read(data, key, worst)


def _read(data: Any, key: str, worst: bool) -> float | None:
    """Figure ``key`` of one merged scenario or component (its worst run's with
    ``worst``); None when it is missing or that scenario failed."""
    if not isinstance(data, dict) or "error" in data:
        return None
    return _number(data.get(f"{key}_max", data.get(key)) if worst else data.get(key))


def _number(v: Any) -> float | None:
    return float(v) if is_number(v) else None


def judge(res: dict[str, Any], t: Target, n: str) -> Judged:
    """Target ``t`` at program count ``n``, every figure read from the result."""
    scenario, key, _ = RATIOS[t.key]
    ratio = _number(res.get("ratios", {}).get(n, {}).get(t.key))
    peer = res.get("ratio_best_peer", {}).get(n, {}).get(t.key)
    mine = _figure(res, "tenure", n, scenario, key)
    zeros = [_figure(res, "tenure", n, scenario, f, worst=True) for f, _ in t.zero]
    verdict = t.verdict(ratio, mine, zeros)
    shown_n = "any" if scenario == "logs" else n
    counts = [f"{fmt(v)} {words}" for v, (_, words) in zip(zeros, t.zero, strict=True)]
    cells = [f"{t.label} ({t.unit})", shown_n, "; ".join([fmt(mine), *counts]), peer or "-",
             fmt(_figure(res, peer, n, scenario, key)),
             "-" if ratio is None else f"{ratio:.2f}x", t.text(), verdict]
    return Judged(t, shown_n, cells, verdict)


def target_ns(res: dict[str, Any], t: Target) -> list[str]:
    """The program counts ``t`` is judged at; logs once, at the run's first count."""
    ns = [str(n) for n in t.ns or res["config"]["ns"]]
    return ns[:1] if RATIOS[t.key][0] == "logs" else ns


def behind_lines(rows: list[Judged]) -> list[str]:
    """'- <label>: <reason>' for each target behind, naming the counts it is behind at."""
    behind: dict[Target, list[str]] = {}
    for r in rows:
        if r.verdict == BEHIND:
            behind.setdefault(r.target, []).append(r.n)
    lines = []
    for t, ns in behind.items():
        where = "" if ns == ["any"] else f" (N = {', '.join(ns)})"
        lines.append(f"- {t.label}{where}: {t.reason or 'behind; no measured reason recorded'}")
    return lines


def targets_section(res: dict[str, Any]) -> list[str]:
    rows = [judge(res, t, n) for t in TARGETS for n in target_ns(res, t)]
    lines = ["## Targets", "", targets_intro(), "",
             "| metric | N | tenure | best peer | best peer's figure | tenure / best peer "
             "| target | verdict |",
             "|---|---:|---:|---|---:|---:|---|---|"]
    lines += ["| " + " | ".join(r.cells) + " |" for r in rows]
    behind = behind_lines(rows)
    return [*lines, "", *([*behind, ""] if behind else []), *component_targets(res)]


def _component_figure(res: dict[str, Any], bench: str, key: str,
                      worst: bool = False) -> float | None:
    """Figure ``key`` of component benchmark ``bench`` (its worst run's with ``worst``);
    None if not run or failed."""
    return _read(res.get("components", {}).get(bench), key, worst)


def judge_component(res: dict[str, Any], t: Target) -> Judged:
    """Component target ``t``: tenure's median against its bounds, counts at their worst."""
    mine = _component_figure(res, t.component, t.key)
    zeros = [_component_figure(res, t.component, f, worst=True) for f, _ in t.zero]
    verdict = t.verdict(None, mine, zeros)
    counts = [f"{fmt(v)} {words}" for v, (_, words) in zip(zeros, t.zero, strict=True)]
    shown = _unmeasured(res, t.component) or "; ".join([fmt(mine), *counts])
    cells = [f"{t.label} ({t.unit})", shown, t.text(), verdict]
    return Judged(t, "any", cells, verdict)


def _unmeasured(res: dict[str, Any], bench: str) -> str:
    """'not run' or 'failed' when component ``bench`` has no figures to show, else ''."""
    data = res.get("components", {}).get(bench)
    if not isinstance(data, dict):
        return "not run"
    return "failed" if "error" in data else ""


def component_targets(res: dict[str, Any]) -> list[str]:
    """'### Component targets': tenure's component figures against absolute targets."""
    rows = [judge_component(res, t) for t in COMPONENT_TARGETS]
    lines = ["### Component targets", "",
             "Tenure's own figures from the component benchmarks (see Results), each "
             "against an absolute target: no peer runs them. The targets are set for the "
             "full suite's arguments; a `--quick` run uses smaller ones (shown under "
             "Component benchmarks) and is judged against the same targets. Counts that "
             "must be 0 are judged on their worst repetition. A benchmark that failed or "
             "was not run is 'not measured'.", "",
             "| metric | tenure | target | verdict |", "|---|---:|---|---|"]
    lines += ["| " + " | ".join(r.cells) + " |" for r in rows]
    behind = behind_lines(rows)
    return [*lines, "", *([*behind, ""] if behind else [])]


def _count(v: Any) -> str:
    return f"{v:,.0f}" if is_number(v) else fmt(v)


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
    return re.sub(r"/tmp/tb-[^/ ]+/[^/ ]+", "W", cmd).replace(str(Path.cwd()) + "/", "")


def _loads(values: Any) -> str:
    return ", ".join(f"{x:.2f}" for x in values) if values else "not recorded"


def _commit(res: dict[str, Any]) -> str:
    c = res.get("commit")
    if not c:
        return "not recorded"
    return f"`{c['sha'][:12]}`" + (" with uncommitted changes" if c.get("dirty") else "")


def machine_lines(res: dict[str, Any]) -> list[str]:
    m, cfg = res["machine"], res["config"]
    reps = res.get("repetitions", [])
    lines = [
        f"- {m['cpus']} CPUs ({m['cpu_model']}), {m['memory_gib']} GiB RAM",
        f"- {m['os']}, kernel {m['kernel']}",
        f"- Python {m['python']}, Node {m['node']}",
        f"- commit {_commit(res)}",
        f"- load average (1, 5, 15 min) before the run: {_loads(m['load_avg_at_start'])}; "
        f"after it: {_loads(m.get('load_avg_at_end'))}",
    ]
    if len(reps) > 1:
        lines.append("- load average at the start of each repetition: "
                     + "; ".join(_loads(r["load_avg_at_start"]) for r in reps))
    peak = max([m["load_avg_at_start"][0], *(m.get("load_avg_at_end") or [0])[:1],
                *(r["load_avg_at_start"][0] for r in reps)])
    if peak >= 0.5 * m["cpus"]:
        lines.append(f"- the machine was shared during the run (1-minute load up to "
                     f"{peak:.2f} on {m['cpus']} CPUs): other work competed for the CPUs, "
                     "so absolute times are pessimistic and move between runs")
    lines.append(f"- whole run: {res['total_wall_s']:.0f} s; {repeats(res)} "
                 f"repetition{'s' if repeats(res) > 1 else ''}; program counts {cfg['ns']}, "
                 f"{cfg['status_runs']} status runs, {cfg['restart_repeats']} kills per N, "
                 f"{cfg['log_lines']:,} log lines")
    return lines


def spread_lines(res: dict[str, Any]) -> list[str]:
    k = repeats(res)
    if k == 1:
        return ["Each figure comes from a single run (`--repeat 1`): no spread is known.", ""]
    limit = flag_at(res)
    out = [f"Each figure is the median of {k} repetitions of the whole suite (each "
           "repetition runs every supervisor in turn). In parentheses: its spread, "
           "(max - min) / median; min and max are in `bench/results/latest.json`. "
           f"{FLAG} marks a spread wider than {limit:.0%}: that figure moved a lot between "
           "repetitions, so compare it with care. Ratios are of medians.", ""]
    marked, total = flagged(res)
    out += [f"{FLAG} on {marked} of {total} figures.", ""]
    return out


def reproduce_lines(res: dict[str, Any]) -> list[str]:
    """How to run it again: what ./dev bench installs, and how long this run took."""
    def pins(key: str) -> str:
        return ", ".join(f"{k} {v}" for k, v in res.get("installed", {}).get(key, {}).items())

    wall, k = res["total_wall_s"], repeats(res)
    return [
        "Reproduce (on Debian or Ubuntu; installs what is missing, runs, renders):", "",
        f"```\n{REPRO}\n```", "",
        "`./dev peers` installs Node.js and npm from apt (for pm2) and the Debian packages "
        "`./dev setup` needs for tenure's `.venv`, as root or through sudo (without either "
        "it names the packages and stops before any run); then, into `bench/.peers/`, "
        f"{pins('python')} with pip and {pins('npm')} with npm. Installing the peers takes "
        f"about 30 s, apt aside. This run took {wall:.0f} s ({wall / 60:.0f} min) on the "
        f"machine below, {k} repetition{'s' if k > 1 else ''}; the time grows with "
        "`--repeat K`.",
        "",
    ]


def header(res: dict[str, Any]) -> list[str]:
    vers = ", ".join(f"{k} {v['version']}" for k, v in res["supervisors"].items())
    return [
        "# Benchmarks: tenure and its peers", "",
        "Generated by `bench/peers/render.py` from `bench/results/latest.json` "
        f"(run started with `{' '.join(res['argv'])}`). Do not edit by hand.", "",
        *reproduce_lines(res),
        "## Machine", "", *machine_lines(res), "",
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
  pid for it (polled every 0.5 ms through its API); median over several programs.
- **restart by command**: the documented restart of one program (`tenure restart
  STACK/APP/N`, `supervisorctl restart`, `circusctl restart --waiting`, `pm2 restart`);
  then the time until its new pid is reported and how many other programs' pids changed
  (none should). Kept in the results JSON (`restart_cmd`), not tabulated.
- **control-plane replacement**: the documented way to restart the daemon
  (`supervisorctl reload`, `circusctl restart`, `pm2 update`); then how many of the N
  program pids changed and the time until all N run again (a state is accepted once it
  has been unchanged for the settle time, which is not included).
- **memory**: summed RSS of the supervisor's own processes (daemon and its non-program
  children), programs excluded, after N programs started and once no child is a forked
  copy of its parent still to exec a program (waited for up to 2 s).
- **logs**: one program writes fixed-width lines to stdout as fast as it can and exits;
  lines/s is lines captured divided by the wall time from the writer's first line to the
  last line reaching the supervisor's log file; lost = written - captured after the writer
  exited and the file stopped growing (bounded wait).

Tenure's component benchmarks (tenure only: no peer has these parts):

- **owner** (`bench/owner.py`): tenure's execution owner alone, in a private home,
  driven through its real RPC socket. Launches per second: `sleep` programs launched by
  one launch call after another, each answered before the next is sent. Exit event:
  `kill -9` of each of them, then the time until a subscriber to the owner's observations
  receives its exit. Log capture: one program writes numbered lines as fast as it can;
  lines/s up to the last line committed to the owner's journal; lost are the lines
  written but not read back from it. RSS: a fresh owner's resident memory with the idle
  `sleep` apps running.
- **handoff** (`bench/handoff.py`): a whole tenure (owner, guardian, backend) with the
  given number of apps, one of them printing a numbered line every 10 ms, and the backend
  upgraded in place again and again while a thread asks the API for `status` as fast as
  it answers. Pause: from the first refused request to the first answered by the new
  backend generation. Upgrade call: wall time of the guardian's upgrade call, which
  `tenure backend upgrade` waits for. Afterwards: apps whose process changed (restarts)
  and numbered lines missing from the journal (lost); both must be 0.

Peer defaults worth knowing: circus checks its watchers every `check_delay` (default 5 s),
which bounds how soon it notices a killed process; supervisord moves a process from
STARTING to RUNNING on its next main-loop tick; pm2 runs a Node daemon.
"""


def markdown(res: dict[str, Any], plots: list[str]) -> str:
    """docs/benchmarks.md for ``res``, linking the chart files ``plots`` (docs/bench/)."""
    lines = header(res)
    lines += ["## Results", "", *spread_lines(res)]
    for n in (str(n) for n in res["config"]["ns"]):
        lines += session_table(res, n)
    lines += ["### Logs", "", *logs_table(res)]
    lines += components_section(res)
    lines += targets_section(res)
    lines += ["## Plots", ""]
    if repeats(res) > 1:
        lines += ["Bars are medians; the whiskers span min to max over the repetitions.", ""]
    lines += [*(f"![{p}](bench/{p})" for p in plots), ""]
    lines += [METHOD]
    lines += commands_section(res)
    return "\n".join(lines).rstrip() + "\n"

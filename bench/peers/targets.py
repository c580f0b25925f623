"""Tenure's targets: the tables behind the Targets section of docs/benchmarks.md.

A target of TARGETS bounds one ratio of bench/aggregate.RATIOS (tenure's median divided
by the best peer's median, same run, same program count) and may bound tenure's own
figures too. A target of COMPONENT_TARGETS bounds one figure of a component benchmark
(bench/owner.py, bench/handoff.py), which only tenure runs, so it has no ratio.
bench/peers/report.py judges each target against a suite result and, under its table,
prints the reason from REASONS for every target that is behind. Only the standard
library, like report.py.
"""

from __future__ import annotations

from dataclasses import dataclass

MET, BEHIND, NOT_MEASURED = "met", "behind", "not measured"

# Why tenure is behind a target: its key -> a short explanation with the measurement
# that shows it. Printed under the Targets table only while that target is behind; an
# empty reason prints "behind; no measured reason recorded".
REASONS: dict[str, str] = {
    "ratio_rss": (
        "three Python interpreters against supervisord's one, each mapping libpython "
        "and its C libraries and building its own module objects. A bare interpreter "
        "is 8.4 MiB resident here; the standard library a daemon needs adds ~14 MiB "
        "(each added alone: asyncio without ssl +6.6 MiB, logging +2.5, sqlite3 +2.2, "
        "json +1.5, msgpack +1.4), so three processes are ~51 MiB, ~2.6x supervisord, "
        "before any tenure code. With 50 apps: owner 26.4, guardian 25.8, backend "
        "23.7 MiB; of each, ~9-12 MiB are mapped files (libpython 5.1, libc 1.4, "
        "libsqlite3 1.3, and libcrypto 3.4 in the owner and the guardian, which "
        "verify and sign Ed25519 grants), the rest Python objects: ~10 MiB of "
        "modules, ~2.5 of interpreter, ~2.5 of state. 2.0x is ~40 MiB for the three, "
        "~13 MiB a process: less than the standard library above, so only a daemon "
        "without asyncio would reach it, a different design of at least two of the "
        "three. Done: modules only rare paths use are not imported at start (2.7 MiB "
        "off the three), the backend hashes without OpenSSL, asyncio is imported "
        "without ssl. Measured, not kept: glibc's malloc_trim after start (0.1-0.3 "
        "MiB a process), one malloc arena a process (0.3 MiB off the three), `python "
        "-OO` (drops the docstrings, ~0.8 MiB a process, but also every assert, and a "
        "sealed release would need bytecode of its own)."),
    "ratio_start_all_running": (
        "a cold start runs three interpreters, one after the other where each needs "
        "the last, on two CPUs, and their CPU time bounds it. The scheduler's record "
        "of one cold start of 50 apps on a quiet machine (perf sched; CPU time of "
        "each process): the command 58 ms; its forked child 75 ms (its imports, and "
        "the release verified before any code of it runs: 1,116 files, 13.8 MB "
        "hashed, ~30 ms); the owner 122 ms; the guardian 104 ms; the backend 105 ms; "
        "the 50 `sleep` programs 45 ms: ~0.51 s of CPU, at least ~0.26 s on two CPUs. "
        "In the same minutes supervisord's whole start took 0.24 s (6 alternated "
        "starts each: tenure 0.35 s, supervisord 0.24 s, 1.45x; the published runs, "
        "on a loaded machine, gave 1.1x-1.6x). Its timeline, from the command's "
        "start: the command and the child keep both CPUs busy to ~55 ms, the child "
        "verifies alone to ~88 ms; the owner and the guardian import and open their "
        "state, both CPUs full, to ~170 ms; the backend's standby interpreter "
        "(prewarmed with the standard library while the guardian verifies the "
        "release) imports the backend alone on one CPU to ~250 ms; activation (fence, "
        "the queued config planned) ends at ~280 ms and the 50 launches, with their "
        "programs' exec, at ~330 ms. 0.7x of supervisord is ~0.17 s there: less than "
        "the owner, the guardian and the backend take to import side by side. Done, "
        "each measured in alternated starts: the child forked before the command line "
        "is imported (~30 ms), the daemons started straight from the verified release "
        "(~0.1 s), the lock probe without /proc/locks (~20 ms), the owner's "
        "descriptor table sized at start (~20 ms), the standby prewarmed beside the "
        "verification. Measured, not kept: starting the standby before the guardian's "
        "own imports (no gain in 16 alternated starts: the CPUs, not the order, are "
        "the limit then); the garbage collector off during the start (no clear "
        "change). Measured, not changed: the owner's 39 dataclasses take ~29 ms of "
        "its start and the guardian's 20 ~16 ms, mostly compiling their generated "
        "methods; as NamedTuples they would take a tenth of that, but a record would "
        "then equal any tuple of its values and be sent as a list, a change to every "
        "record type of the owner, the process meant to change least."),
    "ratio_start_returned": (
        "until ddfff52: every `tenure up` asked /proc/locks whether a `tenure down` runs, "
        "and the first read of /proc/locks in a process waits for an RCU grace period "
        "(10-15 ms here); the lock's own text is read first now. The command made the "
        "parser of each of its 24 commands, 80 gettext lookups (4-6.5 ms), and "
        "imported logging with the queued config's state machine (5-6.5 ms): only the "
        "command's own parser is made, and the queued config's file has a module of its "
        "own. Alternating starts, 50 apps: 0.136 -> 0.096 s. Before: "
        "`tenure up --no-wait` returns once the config is parsed (a bad one starts "
        "nothing) and queued, then verifies the release and starts the daemons in a "
        "forked child, as supervisord returns once it has forked. With 50 apps, 7 runs: "
        "108 ms median, of it the interpreter's start and the CLI's imports (~85 ms; "
        "msgspec's alone ~20 ms), the config parse (~8 ms) and the queue's atomic write "
        "(~3 ms). The command no longer loads typing_extensions with msgspec, OpenSSL's "
        "hashes, shutil for argparse's help width, or the socket address parser for a "
        "config without sockets: alternating runs, 125.5 -> 108.9 ms with 200 apps, "
        "113.6 -> 93.4 ms with 50. At the margin where behind: the peers' own figure "
        "moves by a third between runs (circus at 200: 0.161 s in one run, 0.107 s in "
        "the next, against tenure's 0.091 and 0.110 s); in the run before the change "
        "0.91x at 50 and 1.02x at 200, since then 0.70x and 0.81x, 0.72x and 0.78x, "
        "0.85x and 1.04x (tenure 0.093 and 0.109 s; supervisord 0.109 s at 50, circus "
        "0.105 s at 200), 0.66x and 0.72x, 0.95x and 0.80x, 0.73x and 0.81x, 0.67x and "
        "0.85x (tenure 0.075 and 0.085 s; circus 0.112 and 0.100 s), 0.89x and 0.93x, "
        "and in the run below 0.71x and 0.78x. "
        "The waiting "
        "`tenure up` returns at about the 'all running' time, with the apply's outcome "
        "and the status table."),
    "ratio_status": (
        "at the margin, by noise: tenure status took 39-41 ms with 50 programs and "
        "46-54 ms with 200 in runs of this day, circus's 145-152 ms at 200: the "
        "interpreter's start (~13 ms), the client's imports (~20 ms) and the backend's "
        "answer (at 200: ~9 ms until CPU and memory figures were reused for 0.5 s, "
        "now 1.5-2 ms)."),
    "ratio_restart": (
        "the restart crosses two processes: the owner sees the exit and reports it, "
        "the backend decides and asks the owner to launch, and the benchmark sees the "
        "new pid through the backend's API, which asks the owner (the poll runs every "
        "0.5 ms). In the run below 0.51x at 50 apps and 0.504x at 200 (2.87 and 3.05 "
        "ms; supervisord 5.57 and 6.04), the run before 0.54x and 0.57x. A traced probe "
        "on a quiet machine, 60 kills with 50 apps (medians from the kill, 3 runs): "
        "the owner takes up the exit at 0.31-0.33 ms and reports it at 0.48-0.52; the "
        "backend has it at 0.65-0.75 and sends the launch at 0.97-1.15; the owner "
        "reads it at 1.31-1.42 (0.23-0.26 ms after it was sent, the owner idle: its "
        "CPU had halted), commits the starting row at 1.64-1.71, has spawned at "
        "2.16-2.22, commits the running row at 2.35-2.40; the backend has the answer "
        "at 2.41-2.63 and the poll sees the new pid at 3.11-3.45. Each hop to a "
        "process on the other CPU pays the wake-up of a halted CPU (a ping-pong with "
        "0.5 ms between rounds: 100 us a round across CPUs, 19 us on one): this "
        "machine's idle driver halts a CPU at once (haltpoll, guest_halt_poll_ns=0), so "
        "a wake-up is a VM exit and entry; the owner's spawn waits for two (vfork: the "
        "child placed on the idle CPU, then the owner woken after its exec). So the "
        "poll's own load keeps the CPUs awake: `inspect` without its question of the "
        "owner's held sockets made the kill slower (2.84-2.95 -> 3.57-3.66 ms, 3 "
        "alternated runs of 15 kills; again this day, 3.10-3.41 -> 3.56-3.70 ms). With "
        "200 apps the last look for what outlived the app reads the owner's list of "
        "children (~40 us in the kernel, ~20 us to parse). 0.5x would take out a hop "
        "(the owner deciding restarts itself, which the design leaves to the backend) "
        "or a commit (a launch answered before its pid is recorded, so that an owner's "
        "crash could leave a process its successor cannot name). Done: start ticks "
        "from the boot clock instead of /proc (~0.9 ms), per-key bookkeeping of drains "
        "and descendants (~0.4 ms at 200 apps), `inspect`'s two questions to the owner "
        "sent together (0.4-0.7 ms), and only the held sockets asked, by the request "
        "itself, while every figure is fresh (no tasks and gather: the backend's CPU "
        "per inspect 0.26-0.34 -> 0.23-0.25 ms; the kill, 5 alternated runs of 60: "
        "median 4.09 -> 3.42 ms). Measured, not kept: the zero-delay backoff's relaunch "
        "decided in the exit's own turn of the loop (twice: ~0.2 ms within the spread, "
        "then 3.05-3.89 -> 3.24-4.06 ms in 4 alternated runs of 60 kills); the "
        "owner's `launched` event sent after the running row, next to the answer (3.05-"
        "3.55 -> 3.28-4.01 ms: the earlier event had woken the backend's CPU for the "
        "answer); an `inspect` that does not ask the owner (faster calls, slower "
        "kills); reporting the exit before the last look (0.3-0.45 ms, but the exit "
        "would be known before what outlived the app is attributed)."),
    "ratio_logs": (
        "by the machine's load, at the margin: tenure drains the writer's pipe faster than "
        "supervisord does (the writer ran 0.68-0.94 s under tenure, 0.97-1.50 s under "
        "supervisord, 0.73-1.01 s alone, in the five repetitions of the run published at "
        "3730df1) and commits the lines to its SQLite journal behind it, the last ~0.2-0.5 s "
        "after the writer ended; supervisord appends to a file as it reads. So the figure is "
        "the journal's commit rate: 1.14, 1.09, 0.87, 0.88 and 0.77 M lines/s in the five "
        "repetitions, falling as the load rose (0.35 to 1.30), none lost. The previous full "
        "run, with the same journal code, measured 1.33 M lines/s, 1.11x supervisord. Since "
        "retention counts each record's cost (~32 bytes besides the line), the scenario's app "
        "is given a budget that holds the whole run, as supervisord is told to keep everything "
        "(maxbytes=0): under the default 64 MiB the journal kept the last ~795,000 lines of "
        "the million."),
    "ratio_replace_returned": (
        "a backend upgrade checks the candidate before the incumbent is touched: its "
        "standby starts (interpreter and standard library ~70 ms, overlapping the "
        "release's verification), imports the backend (~40 ms) and reports: `checked` "
        "takes ~0.11 s with 200 apps; then the pause (drain, checkpoint, fence, retire, "
        "activate; the standby parsed the config meanwhile) ~0.05 s; the command's own "
        "start ~0.05 s. 0.22 s at 200 apps in the run published at 3730df1, 0.26 s in "
        "the run below (a machine loaded up to 1.37)."),
    # component benchmarks (COMPONENT_TARGETS)
    "spawn_per_s": (
        "one launch call after another, each answered before the next is sent, so the "
        "figure is a round trip, ~1.0-1.2 ms here. The owner's part, probes of 600 "
        "launches (medians): 0.64 ms, of which Popen 0.32 ms (vfork: the owner waits "
        "until the child has exec'd, as a bare process does here; the kernel places "
        "the child on the idle CPU, which it must wake first: ~0.11 ms of a traced "
        "vfork's ~0.26 ms passed before the child ran), the starting and "
        "the running row's commits 0.083 ms each (a launch is recorded before its "
        "process exists and its pid before the answer) and the watch 0.045 ms; the "
        "client's send ~0.07 ms (it wakes the owner on the other CPU); a `ping` round "
        "trip 0.083 ms. The machine's load moves it by ±15%: 3 runs at a4cfc2b gave "
        "850, 930 and 947/s; the published runs 661-1,231/s. Done: the descriptor "
        "table sized at start (its growth under launches 77 and 162 of a fresh owner "
        "waited 12-35 ms for an RCU grace period each; 739-860 -> 942-1,213/s), start "
        "ticks from the boot clock instead of /proc (726-765 -> 801-981/s), a lone "
        "launch committed at once instead of after two turns of the loop (~900 -> "
        "~970/s). Measured, not kept: os.posix_spawn (no change beyond the noise, and "
        "in Python 3.11 it cannot set a working directory or close inherited "
        "descriptors); a spawn thread overlapping Popen's wait (no change for a burst "
        "of 200, two thread hops added to every lone launch)."),
    "log_lines_per_s": "",
    "owner_rss_mb_1000": "",
    "pause_p50_ms": (
        "with 200 apps (bench/handoff.py's default; with 50 apps the pause is ~35-46 ms). "
        "The pause ends at the new generation's first answer to `status`, whose CPU and "
        "memory figures the owner had to measure for all 200 apps (~4 ms); it now "
        "answers a new connection with its last measurement, if younger than 2 s (4 "
        "alternating runs: 56-83 -> 50-63 ms). The guardian's diagnostics file (~0.9 "
        "ms a phase) was moved to its loop's next turn, and the checkpoint is read "
        "for the verification only after the candidate started (7 alternating runs: "
        "50.6 -> 48.4 ms). The "
        "order is the handoff's safety: the candidate acts only once the incumbent is "
        "fenced, has exited and closed its stores, so two generations never act at "
        "once. Inside the pause the guardian's own work competed for the two CPUs: each "
        "phase change rewrote its diagnostics file (~0.9 ms of CPU with 200 apps, six "
        "times from the drain to the end); it is now written 0.1 s after the first "
        "change, once for all (alternating runs, 6 x 10 handoffs each: 54.9 -> 44.0 "
        "ms). Before that, four round trips or their cost left the pause (6 x 10 "
        "alternating: 49.8 -> 46.1 ms): the handoff's calls to the incumbent share one "
        "connection (~1.3 ms of the retire's call and ~0.4 ms of the checkpoint's had "
        "been the connection), the fence takes the owner's epoch from the check (~1.5 ms), "
        "the candidate asks for the owner's inventory once (~1.2 ms) and imports the "
        "home watch before its activation (~0.9 ms). Probes of 10 handoffs with "
        "these changes (pause p50 38.6 ms), from the drain: the checkpoint written 4.4 "
        "ms, the fence 2.9, the retire until the guardian sees the incumbent's exit "
        "6.0 (its close 2.0, the exit ~2.4), the candidate from its activation until "
        "its API listens 12.4 (the checkpoint read and checked 1.9; the inventory, "
        "the intents and 200 instances restored 4.7; the owner's handshake 1.2; its "
        "stores 1.3), its first answer ~2.8 ms later. The pause moves with the "
        "machine's load: the five repetitions of the run below gave 40.0, 44.9, 41.3, "
        "35.9 and 43.6 ms (the machine loaded up to 1.37), those of the previous "
        "published runs 33.7, 30.4, 26.6, 31.8 and 34.9 ms, 28.5, 26.8, 31.3, 24.9 "
        "and 22.6 ms and 27.6, 28.1, 27.4, 30.7 and 27.5 ms, and before the changes "
        "that took it under 50 ms "
        "43.4, 64.0, 70.0, 67.7 and 42.0 ms."),
    "upgrade_call_p50_ms": "",
}


@dataclass(frozen=True)
class Target:
    # a ratio key of bench/aggregate.RATIOS, or with ``component`` a figure of that
    # component benchmark's JSON
    key: str
    label: str
    unit: str  # of the figure behind the ratio
    at_most: float | None = None  # the ratio's maximum
    at_least: float | None = None  # the ratio's minimum (where higher is better)
    figure_at_most: float | None = None  # the maximum of tenure's own median
    figure_at_least: float | None = None  # the minimum of tenure's own median
    # (figure, words): tenure's figures of the same scenario that must be 0 in every
    # repetition (judged on their worst run)
    zero: tuple[tuple[str, str], ...] = ()
    ns: tuple[int, ...] = ()  # the program counts judged; () judges every count run
    # the component benchmark ("owner", "handoff") whose figure ``key`` is; "" for a
    # ratio target
    component: str = ""

    @property
    def reason(self) -> str:
        return REASONS.get(self.key, "")

    def text(self) -> str:
        """The target as the table shows it, e.g. '≥ 1.00x; 0 lines lost'."""
        parts = []
        if self.at_most is not None:
            parts.append(f"≤ {self.at_most:.2f}x")
        if self.at_least is not None:
            parts.append(f"≥ {self.at_least:.2f}x")
        if self.figure_at_most is not None:
            parts.append(f"≤ {self.figure_at_most:,g} {self.unit}")
        if self.figure_at_least is not None:
            parts.append(f"≥ {self.figure_at_least:,g} {self.unit}")
        parts += [f"0 {words}" for _, words in self.zero]
        return "; ".join(parts)

    def outcomes(self, ratio: float | None, figure: float | None,
                 zeros: list[float | None]) -> list[bool | None]:
        """Each bound: True met, False missed, None not measured."""
        out = []
        if self.at_most is not None:
            out.append(_at_most(ratio, self.at_most))
        if self.at_least is not None:
            out.append(None if ratio is None else ratio >= self.at_least)
        if self.figure_at_most is not None:
            out.append(_at_most(figure, self.figure_at_most))
        if self.figure_at_least is not None:
            out.append(None if figure is None else figure >= self.figure_at_least)
        return out + [_at_most(v, 0) for v in zeros]

    def verdict(self, ratio: float | None, figure: float | None,
                zeros: list[float | None]) -> str:
        """BEHIND if any bound is missed, else NOT_MEASURED if any is unknown, else MET."""
        out = self.outcomes(ratio, figure, zeros)
        if False in out:
            return BEHIND
        return NOT_MEASURED if None in out or not out else MET


def _at_most(v: float | None, limit: float) -> bool | None:
    return None if v is None else v <= limit


TARGETS = [
    Target("ratio_rss", "supervisor RSS", "MiB", at_most=2.0),
    Target("ratio_start_all_running", "start: command to all running", "s", at_most=0.7),
    Target("ratio_start_returned", "start: command returned", "s", at_most=1.0),
    Target("ratio_status", "status CLI, median", "ms", at_most=0.35),
    Target("ratio_restart", "kill -9 to new pid reported, median", "ms", at_most=0.5),
    Target("ratio_logs", "log lines captured per second", "lines/s", at_least=1.0,
           zero=(("lost", "lines lost"),)),
    # absolute: the ratio is shown for information only
    Target("ratio_replace_returned", "control-plane replacement: command returned", "s",
           figure_at_most=0.3, zero=(("pids_changed", "program pids changed"),), ns=(200,)),
]

# Tenure's own figures from its component benchmarks, run by bench/suite.py with the
# arguments in its config; no peer has these parts, so no ratio. The bounds are the
# project's performance targets, set for the full run's arguments.
COMPONENT_TARGETS = [
    Target("spawn_per_s", "owner: launches per second", "launches/s",
           figure_at_least=1000, component="owner"),
    Target("log_lines_per_s", "owner: log lines committed per second", "lines/s",
           figure_at_least=200_000, zero=(("log_lines_lost", "lines lost"),),
           component="owner"),
    Target("owner_rss_mb_1000", "owner: RSS with the idle apps", "MiB",
           figure_at_most=60, component="owner"),
    Target("pause_p50_ms", "handoff: control-plane pause, median", "ms",
           figure_at_most=50, zero=(("app_restarts", "app restarts"),
                                    ("log_lines_lost", "lines lost")),
           component="handoff"),
    Target("upgrade_call_p50_ms", "handoff: upgrade call, median", "ms",
           figure_at_most=300, component="handoff"),
]

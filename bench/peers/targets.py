"""Tenure's targets against its peers: the table behind the Targets section of
docs/benchmarks.md.

A target bounds one ratio of bench/aggregate.RATIOS (tenure's median divided by the best
peer's median, same run, same program count) and may bound tenure's own figures too.
bench/peers/report.py judges each target against a suite result and, under its table,
prints the reason from REASONS for every target that is behind. Only the standard
library, like report.py.
"""

from __future__ import annotations

from dataclasses import dataclass

MET, BEHIND, NOT_MEASURED = "met", "behind", "not measured"

# Why tenure is behind a target: ratio key -> a short explanation with the measurement
# that shows it. Printed under the Targets table only while that target is behind; an
# empty reason prints "behind; no measured reason recorded".
REASONS: dict[str, str] = {
    "ratio_rss": (
        "three Python processes against supervisord's one. Measured on this machine: an "
        "interpreter with asyncio, sqlite3, msgpack and hashlib loaded is already ~21 MiB, "
        "and the owner and the guardian each map cryptography's Rust extension (~8.5 MiB "
        "resident) for the Ed25519 grants that fence backends, so the floor of this design "
        "is about 80 MiB (~3.6x); today: owner 41, guardian 42, backend 30 MiB."),
    "ratio_start_all_running": (
        "a cold `tenure up` starts three interpreters, two of them in turn: owner and "
        "guardian side by side (each verifies its sealed release, ~50 ms for ~1,250 "
        "files, and imports ~130 ms), then the backend generation (its release verified "
        "while its interpreter starts, ~150 ms of imports, ~40 ms of it creating the "
        "model's dataclasses), and only then the config is applied. Measured phases with "
        "50 apps: daemons up 0.33 s, backend up 0.15 s, apply and all running 0.09 s, "
        "the CLI itself 0.09 s."),
    "ratio_start_returned": (
        "`tenure up` returns once the config is applied and reports the apply's outcome "
        "and the status table, so it waits for the daemons and the apply above; "
        "supervisord and circus return as soon as their daemon has forked, before any "
        "program runs."),
    "ratio_status": (
        "at the margin, by noise: tenure status took 41.5 ms with 50 programs and 54.3 ms "
        "with 200 in this run (the 150 more rows are the backend's answer with the "
        "owner's measurements of each, and the table); in runs of the same day the "
        "figure at 200 was 48-54 ms, for the previous tree as well, and circus's "
        "148-152 ms, so the ratio moves between 0.31x and 0.37x around the target."),
    "ratio_restart": (
        "the restart crosses two processes and five socket hops on two CPUs: the owner "
        "sees the exit (pidfd, the pipes' end, a last look for descendants) and tells "
        "the backend, which asks the owner to launch; the owner commits the row, spawns, "
        "commits the running row and answers; the backend reports the new pid. No fsync "
        "is left on that path (launch and exit rows are WAL commits that survive the "
        "owner's crash). Watched from an observation subscriber with 8 programs: the exit "
        "event arrives after 0.7-2.2 ms, the new launch after ~3.1 ms, the API reports "
        "the new pid after ~4.2 ms."),
    "ratio_logs": "",
    "ratio_replace_returned": (
        "a backend upgrade checks the candidate before the incumbent is touched: its "
        "release is verified (~17 ms when the guardian hashed it before, else ~50 ms) "
        "while its interpreter starts and imports the standard library (~50 ms), then it "
        "imports the backend (~77 ms, ~30 ms of it creating dataclasses), so `checked` "
        "takes ~0.17-0.2 s; the pause (drain, checkpoint, fence, retire, activate) "
        "~0.05 s with 200 apps (bench/handoff.py); the command itself ~0.05 s. Meeting "
        "0.3 s needs a "
        "candidate running before the command, a standing spare of ~30 MiB that the RSS "
        "target cannot afford."),
}


@dataclass(frozen=True)
class Target:
    key: str  # a ratio key of bench/aggregate.RATIOS
    label: str
    unit: str  # of the figure behind the ratio
    at_most: float | None = None  # the ratio's maximum
    at_least: float | None = None  # the ratio's minimum (where higher is better)
    figure_at_most: float | None = None  # the maximum of tenure's own median
    # (figure, words): tenure's figures of the same scenario that must be 0 in every
    # repetition (judged on their worst run)
    zero: tuple[tuple[str, str], ...] = ()
    ns: tuple[int, ...] = ()  # the program counts judged; () judges every count run

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
            parts.append(f"≤ {self.figure_at_most:g} {self.unit}")
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

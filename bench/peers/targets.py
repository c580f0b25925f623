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
        "interpreter that has imported asyncio (without ssl), sqlite3, hashlib, logging, "
        "json and msgpack is 20.2 MiB resident before any tenure code, libpython's pages "
        "counted again in each process, so three of them are ~60 MiB, ~3x supervisord, "
        "before tenure's own modules and state (~7.5 MiB per daemon). Today with 50 "
        "apps: owner 27.7, guardian 28.2, backend 27.7 MiB (Ed25519 now comes from the "
        "libcrypto hashlib maps, no longer from the cryptography package's ~8.5 MiB "
        "extension in the owner and the guardian; was 41, 42, 30 MiB)."),
    "ratio_start_all_running": (
        "a cold `tenure up` starts three interpreters, the backend after the other two. "
        "With 50 apps: the command spends ~0.13 s before it starts a daemon (its imports "
        "and parsing the config, which must be valid before anything starts, ~0.1 s; "
        "verifying the release the daemons run, ~0.03 s); owner and guardian listen "
        "~0.28 s after the command started (~0.13 s of imports each, side by side); the "
        "backend generation listens at ~0.46 s (~0.12 s of imports, ~30 ms of it "
        "creating the model's dataclasses, then it restores its state and fences in); "
        "the config is applied and all 50 run at ~0.57 s."),
    "ratio_start_returned": (
        "`tenure up` returns once the config is applied and reports the apply's outcome "
        "and the status table, so it waits for the daemons and the apply above; "
        "supervisord and circus return as soon as their daemon has forked, before any "
        "program runs."),
    "ratio_status": (
        "at the margin, by noise: tenure status took 39-41 ms with 50 programs and "
        "46-54 ms with 200 in runs of this day, circus's 145-152 ms at 200: the "
        "interpreter's start (~13 ms), the client's imports (~20 ms) and, at 200, the "
        "backend's answer (~9 ms, of it the owner's CPU and memory readings of 200 "
        "processes, ~6 ms)."),
    "ratio_restart": (
        "the restart crosses two processes and five socket hops on two CPUs: the owner "
        "sees the exit (pidfd, the pipes' end, a last look for descendants) and tells "
        "the backend, which asks the owner to launch; the owner commits the row, spawns, "
        "commits the running row and answers; the backend reports the new pid. No fsync "
        "is left on that path (launch and exit rows are WAL commits that survive the "
        "owner's crash). Watched from an observation subscriber with 50 programs: the "
        "exit event arrives after ~1.0 ms, the new launch after ~3.3 ms, the API reports "
        "the new pid after ~4.3 ms (200 programs: 1.2, 3.7, 4.7 ms); each step is a few "
        "hundred microseconds of Python, none stands out in a profile."),
    "ratio_logs": "",
    "ratio_replace_returned": (
        "a backend upgrade checks the candidate before the incumbent is touched: its "
        "standby starts (interpreter and standard library ~50 ms, overlapping the "
        "release's verification, ~13 ms when the guardian hashed it before), imports the "
        "backend (~77 ms, ~30 ms of it creating dataclasses) and reports: `checked` "
        "takes ~0.16 s; the pause (drain, checkpoint, fence, retire, activate) ~0.05 s "
        "with 200 apps (bench/handoff.py); the command's own start ~0.05 s. At 200 apps "
        "the command returned in 0.30-0.32 s in runs of this day, 0.26 s at 50. "
        "Meeting 0.3 s with room needs a candidate running before the command, a "
        "standing spare of ~25 MiB that the RSS target cannot afford."),
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

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
    "ratio_rss": "",
    "ratio_start_all_running": "",
    "ratio_start_returned": "",
    "ratio_status": "",
    "ratio_restart": "",
    "ratio_logs": "",
    "ratio_replace_returned": "",
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

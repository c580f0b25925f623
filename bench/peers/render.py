"""Render a suite result JSON into docs/benchmarks.md and docs/bench/*.png.

Runs under the peers venv (it has matplotlib): bench/.peers/py/bin/python
bench/peers/render.py RESULT.json DOCS_DIR. Every number comes from RESULT.json; the
text is bench/peers/report.py's, the charts are drawn here.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import matplotlib

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a script

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from bench.aggregate import is_number
from bench.peers.report import METRICS, fmt, markdown


def bars(data: list[dict[str, Any]], key: str) -> tuple[list[float], list[list[float]]]:
    """Medians (0 where missing or failed) and their min/max whiskers as matplotlib's yerr."""
    vals, low, high = [], [], []
    for d in data:
        v = d.get(key) if "error" not in d else None
        v = float(v) if is_number(v) else 0.0
        vals.append(v)
        low.append(v - float(d.get(f"{key}_min", v)) if v else 0.0)
        high.append(float(d.get(f"{key}_max", v)) - v if v else 0.0)
    return vals, [low, high]


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
            data = [entry["sessions"].get(n, {}).get(scenario, {}) for n in ns]
            vals, yerr = bars(data, key)
            out = ax.bar([j + i * width for j in range(len(ns))], vals, width, label=name,
                         yerr=yerr, capsize=2, error_kw={"elinewidth": 0.8})
            ax.bar_label(out, labels=[fmt(float(v)) for v in vals], fontsize=7)
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
    vals, yerr = bars([sups[s]["logs"] for s in sups], "lines_per_s")
    ax.bar(list(sups), vals, yerr=yerr, capsize=2, error_kw={"elinewidth": 0.8})
    ax.set_title("log lines captured per second")
    ax.set_ylabel("lines/s")
    fig.tight_layout()
    fig.savefig(outdir / "logs-lines-per-s.png", dpi=100)
    plt.close(fig)
    return "logs-lines-per-s.png"


def render(res: dict[str, Any], docs: Path) -> None:
    names = plots(res, docs / "bench")
    (docs / "benchmarks.md").write_text(markdown(res, names))


def main() -> None:
    res = json.loads(Path(sys.argv[1]).read_text())
    render(res, Path(sys.argv[2]))
    print(f"rendered {Path(sys.argv[2]) / 'benchmarks.md'}")


if __name__ == "__main__":
    main()

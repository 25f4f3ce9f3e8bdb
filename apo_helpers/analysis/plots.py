"""Figure helpers: consistent style, and every figure saved as a PNG under ``figures/`` (all notebooks)."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd

from ..config import figures_dir


def save(fig, name: str, directory: Path | None = None) -> Path:
    """Save ``fig`` as ``<directory>/<name>.png`` (150 dpi, tight) and return the path; by default in
    ``figures_dir()``: figures/ under the class profile, runs/figures_<profile>/ under the others."""
    directory = Path(directory) if directory is not None else figures_dir()
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.png"
    fig.savefig(path, dpi=150, bbox_inches="tight", metadata={"Software": None})
    return path


def success_bars(table: pd.DataFrame, title: str, ax=None):
    """Success rate per row of a ``summary_table`` with its 95% interval as error bars, plus the mean score."""
    fig, ax = (ax.figure, ax) if ax is not None else plt.subplots(figsize=(6, 3.2))
    x = range(len(table))
    err = [table["success_rate"] - table["ci95_low"], table["ci95_high"] - table["success_rate"]]
    ax.bar(x, table["success_rate"], yerr=err, capsize=4, color="#4c72b0", label="success rate (95% CI)")
    ax.plot(x, table["mean_score"], "o", color="#dd8452", label="mean score")
    ax.set_xticks(list(x), table.index)
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("fraction")
    ax.set_title(title)
    ax.legend(loc="upper left", fontsize=8)
    return fig


def seed_range(ax, x: float, values, **kwargs) -> tuple[float, float, float]:
    """One result over seeds as a point (notebook 04 section 6): the mean of ``values`` at ``x`` with a bar from the
    lowest to the highest seed. ``kwargs`` go to ``ax.errorbar``. Returns (mean, lowest, highest)."""
    values = pd.Series(values, dtype=float)
    mean, low, high = values.mean(), values.min(), values.max()
    ax.errorbar([x], [mean], yerr=[[mean - low], [high - mean]], capsize=4, **kwargs)
    return mean, low, high


def seed_band(ax, table: pd.DataFrame, column: str, x: str = "iteration", label: str | None = None,
              fmt: str = "-", alpha: float = 0.3) -> pd.DataFrame:
    """Curves over seeds (notebooks 04 and 05): the mean of ``column`` at each ``x`` over the rows of ``table``
    (one per seed and x), with the band between the lowest and the highest seed. Returns the mean/min/max table."""
    band = table.groupby(x)[column].agg(["mean", "min", "max"])
    ax.plot(band.index, band["mean"], fmt, label=label)
    ax.fill_between(band.index, band["min"], band["max"], alpha=alpha)
    ax.set_xlabel(x)
    return band


def gain_intervals(table: pd.DataFrame, target: float | None = None, title: str = "", ax=None):
    """Gains over a baseline with their paired bootstrap intervals (notebook 07 section 3): one row per row of a
    ``significance.gain_table``, labelled by its ``label`` column (else ``policy``), with 0 and ``target`` marked."""
    rows = table.reset_index(drop=True)
    fig, ax = (ax.figure, ax) if ax is not None else plt.subplots(figsize=(7, 0.45 * len(rows) + 1.2))
    y = range(len(rows))
    err = [rows["gain"] - rows["low"], rows["high"] - rows["gain"]]
    ax.errorbar(rows["gain"], list(y), xerr=err, fmt="o", capsize=3, color="#4c72b0", label="gain, 95% interval")
    ax.axvline(0, color="#999999", lw=1)
    if target is not None:
        ax.axvline(target, color="#c44e52", ls="--", lw=1, label=f"target {target:+.0%}")
    ax.set_yticks(list(y), rows["label"] if "label" in rows else rows["policy"], fontsize=8)
    ax.invert_yaxis()
    ax.xaxis.set_major_formatter(plt.FuncFormatter(lambda v, _: f"{v:+.0%}"))
    ax.set_xlabel("test success minus the baseline's (points)")
    ax.set_title(title)
    ax.legend(loc="lower right", fontsize=8)
    return fig


def sweep_effect(table: pd.DataFrame, setting: str = "β₂", target: float | None = None, title: str = ""):
    """A setting swept over runs from one pi_ref (notebook 07 section 3): per value, the mean of seeds with a bar
    from the lowest to the highest seed, on three panels: greedy test success beside pi_ref's (and, with ``target``,
    pi_ref's plus that many points), the KL to pi_ref late in training, and the gradient norm before clipping over the
    same iterations. ``table`` is a ``sweeps.sweep_table``; the values go on a log axis."""
    panels = [("test_success", "greedy test success", "#4c72b0"),
              ("kl", "KL to π_ref late in training\n(nats per trajectory)", "#dd8452"),
              ("grad_norm", "gradient norm late in training\n(before clipping)", "#55a868")]
    fig, axes = plt.subplots(1, len(panels), figsize=(14, 3.4))
    values = sorted(table["value"].unique())
    for value, rows in table.groupby("value"):
        for ax, (column, _, color) in zip(axes, panels):
            seed_range(ax, value, rows[column], fmt="o", color=color)
    if not table.empty:
        ref = table["ref_test_success"].iloc[0]
        axes[0].axhline(ref, color="#999999", lw=1, label=f"π_ref ({ref:.1%})")
        if target is not None:
            axes[0].axhline(ref + target, color="#c44e52", ls="--", lw=1, label=f"π_ref + {target * 100:g} points")
        low, high = axes[0].get_ylim()
        axes[0].set_ylim(low, high + 0.25 * (high - low))  # headroom, so the legend covers no seed's bar
        axes[0].legend(loc="upper right", fontsize=8, ncol=2)
    axes[0].yaxis.set_major_formatter(plt.FuncFormatter(lambda v, _: f"{v:.0%}"))
    for ax, (_, panel_title, _) in zip(axes, panels):
        ax.set_title(panel_title, fontsize=10)
        ax.set_xscale("log")
        if values:  # ticks at the swept values only: a log axis's own labels crowd a range under a decade
            ax.set_xticks(values, [f"{v:g}" for v in values])
            ax.xaxis.set_minor_locator(plt.NullLocator())
            ax.set_xlim(values[0] / 1.4, values[-1] * 1.4)
        ax.set_xlabel(setting)
    spread = "mean of seeds, bar from the lowest seed to the highest"
    fig.suptitle(f"{title}\n{spread}" if title else spread, y=1.13)
    return fig


MODEL_COLORS = {"1.1M": "#4c72b0", "2.3M": "#dd8452", "3.9M": "#55a868"}
"""A colour per tiny-Llama size in ``start_and_end`` (other sizes are drawn grey)."""


def start_and_end(table: pd.DataFrame, target: float | None = None, title: str = "", ax=None):
    """Every trained run as one point (notebook 07 section 1): its pi_ref's test success across, its seeds' mean up,
    with a bar from the lowest seed to the highest; coloured by model size, hollow for re-anchored runs (whose
    ``start`` is their first pi_ref). The diagonal is "no change"; with ``target`` a dashed line that many points
    above it. ``table`` is a ``readme.starts_and_ends``. Points above the diagonal gained; a flat cloud means the
    runs end near one level whatever their start."""
    fig, ax = (ax.figure, ax) if ax is not None else plt.subplots(figsize=(6, 5))
    for model, rows in table.groupby("model"):
        color = MODEL_COLORS.get(model, "#999999")
        for anchored, part in rows.groupby(rows["rounds"] > 0):
            err = [part["end"] - part["lowest"], part["highest"] - part["end"]]
            ax.errorbar(part["start"], part["end"], yerr=err, fmt="o", ms=5, capsize=2, elinewidth=0.8,
                        color=color, mfc="white" if anchored else color, alpha=0.85,
                        label=f"{model}{', re-anchored' if anchored else ''} ({len(part)})")
    if not table.empty:
        low = min(table["start"].min(), table["lowest"].min()) - 0.02
        high = max(table["start"].max() + (target or 0), table["highest"].max()) + 0.02
        line = pd.Series([low, high])
        ax.plot(line, line, color="#999999", lw=1, label="no change")
        if target is not None:
            ax.plot(line, line + target, color="#c44e52", ls="--", lw=1, label=f"π_ref + {target * 100:g} points")
        ax.set_xlim(low, high)
        ax.set_ylim(low, high)
    percent = plt.FuncFormatter(lambda v, _: f"{v:.0%}")
    ax.xaxis.set_major_formatter(percent)
    ax.yaxis.set_major_formatter(percent)
    ax.set_xlabel("π_ref's test success (the run's first π_ref)")
    ax.set_ylabel("after training: test success (mean of seeds)")
    ax.set_title(title)
    ax.legend(loc="upper left", fontsize=7)
    return fig

"""One A*PO setting swept over committed runs: its effect on held-out success and on the KL to pi_ref (notebook 07
section 3, "β₂ swept from one π_ref").

Each value of the setting is a ``train --gather --save --name NAME`` run whose tables lie under ``data/results/``:
``NAME_class_seeds.csv`` (one row per seed's final test and val success, plus pi_ref's row) and
``NAME_class_history.csv`` (one row per seed and iteration, with the KL estimate to pi_ref). ``sweep_table`` puts one
row per value and seed side by side; ``plots.sweep_effect`` draws it.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from ..config import RESULTS_DIR

SWEEP_COLUMNS = ["value", "run", "seed", "test_success", "val_success", "kl", "log_ratio_abs", "grad_norm",
                 "ref_test_success"]
"""``value``: the swept setting's value; ``kl``, ``log_ratio_abs`` and ``grad_norm`` (the gradient's norm before
clipping): that seed's mean over the late iterations."""


def committed_tables(name: str, profile: str = "class", results: Path = RESULTS_DIR) -> dict[str, pd.DataFrame]:
    """A committed run's seeds and history tables; a clear error naming the missing file."""
    tables = {}
    for part in ("seeds", "history"):
        path = Path(results) / f"{name}_{profile}_{part}.csv"
        if not path.exists():
            raise FileNotFoundError(f"run {name!r} has no {part} table: {path} is missing "
                                    f"(python -m apo_helpers train ... --gather --save --name {name} writes it)")
        tables[part] = pd.read_csv(path)
    return tables


def sweep_table(runs: dict[float | str, str], late: tuple[int, int] = (40, 59), profile: str = "class",
                results: Path = RESULTS_DIR, skip_missing: bool = True) -> pd.DataFrame:
    """One row per swept value and seed (``SWEEP_COLUMNS``): the seed's final test and val success, and its KL to
    pi_ref, |log π/π_ref| and gradient norm averaged over iterations ``late`` (inclusive: a window every run has,
    where the curves have settled; a history without ``grad_norm`` leaves it NaN). ``runs`` maps each value (a number,
    or a label for settings that are not one number) to its run's table name; with ``skip_missing`` a run whose
    tables are not committed yet is left out, otherwise it raises. The runs must share one pi_ref, or their gains
    would not compare."""
    rows, refs = [], set()
    first, last = late
    for value, name in runs.items():
        try:
            tables = committed_tables(name, profile, results)
        except FileNotFoundError:
            if skip_missing:
                continue
            raise
        seeds = tables["seeds"]
        ref_rows = seeds[seeds["objective"] == "pi_ref"]
        if ref_rows.empty:
            raise ValueError(f"run {name!r} has no pi_ref row in its seeds table: gather it without --skip-ref")
        refs.add(str(ref_rows["ref"].iloc[0]))
        history = tables["history"]
        window = history[history["iteration"].between(first, last)]
        for _, row in seeds[seeds["objective"] != "pi_ref"].iterrows():
            seed_window = window[window["seed"] == row["seed"]]
            if seed_window.empty:
                raise ValueError(f"run {name!r} seed {int(row['seed'])} has no history in iterations {first}-{last}")
            rows.append({"value": value, "run": name, "seed": int(row["seed"]), "test_success": row["test_success"],
                         "val_success": row["val_success"], "kl": seed_window["kl"].mean(),
                         "log_ratio_abs": seed_window["log_ratio_abs"].mean(),
                         "grad_norm": seed_window["grad_norm"].mean() if "grad_norm" in seed_window else float("nan"),
                         "ref_test_success": ref_rows["test_success"].iloc[0]})
    if len(refs) > 1:
        raise ValueError(f"the swept runs start from different pi_refs ({sorted(refs)}); their gains do not compare")
    return pd.DataFrame(rows, columns=SWEEP_COLUMNS)


def sweep_summary(table: pd.DataFrame) -> pd.DataFrame:
    """Per value: the mean test success over seeds, its spread (std, ddof=0, as the README's tables), the gain over
    pi_ref, the mean val success and the late KL, log-ratio and gradient norm, lowest value first."""
    grouped = table.groupby("value")
    summary = pd.DataFrame({
        "run": grouped["run"].first(),
        "seeds": grouped["seed"].count(),
        "test success": grouped["test_success"].mean(),
        "std over seeds": grouped["test_success"].std(ddof=0),
        "gain over π_ref": grouped["test_success"].mean() - grouped["ref_test_success"].first(),
        "val success": grouped["val_success"].mean(),
        "KL (late)": grouped["kl"].mean(),
        "|log π/π_ref| (late)": grouped["log_ratio_abs"].mean(),
        "gradient norm (late)": grouped["grad_norm"].mean()})
    return summary.sort_index()


OPTION_BEHAVIOUR = {"test_option_clicked": "option clicked", "test_options_right": "every value right",
                    "test_success_with_options": "success, goals with options",
                    "test_success_without_options": "success, goals without"}
"""The seeds tables' greedy test columns on the goals that ask for an option (an option clicked, every requested
value right, success) and success on the other goals, under the names notebook 07 prints."""


def labelled_summary(runs: dict[str, str], profile: str = "class", results: Path = RESULTS_DIR) -> pd.DataFrame | None:
    """``sweep_summary`` of runs compared under labels rather than one swept number (notebook 07 section 3), in the
    order of ``runs``, with the seeds' means of the greedy test episodes' option columns beside it (``option
    clicked``, ``every value right``: on the test goals that ask for an option) and their invalid actions. None while
    any of the runs' tables is not committed."""
    table = sweep_table(runs, profile=profile, results=results)
    if table.empty or table["value"].nunique() < len(runs):
        return None
    summary = sweep_summary(table).loc[list(runs)]
    seeds = {label: committed_tables(name, profile, results)["seeds"].query("objective != 'pi_ref'")
             for label, name in runs.items()}
    columns = {column: OPTION_BEHAVIOUR[column] for column in ("test_option_clicked", "test_options_right")}
    for column, title in {**columns, "test_invalid_rate": "invalid actions"}.items():
        summary[title] = [seeds[label][column].mean() if column in seeds[label] else float("nan")
                          for label in summary.index]
    return summary


def option_behaviour(name: str, objective: str = "apo", profile: str = "class",
                     results: Path = RESULTS_DIR) -> pd.Series:
    """A committed run's ``OPTION_BEHAVIOUR`` columns, the mean over its rows of ``objective`` (``"pi_ref"``: its
    pi_ref's row), and their count as ``rows averaged``; NaN for a column an older table lacks. Notebook 07
    section 3 sets a pi_ref imitated from the full expert beside the sloppy pi_ref and its best run."""
    seeds = committed_tables(name, profile, results)["seeds"]
    rows = seeds[seeds["objective"] == objective]
    if rows.empty:
        raise ValueError(f"run {name!r} has no {objective!r} rows in its seeds table")
    behaviour = _option_means(rows)
    behaviour["rows averaged"] = len(rows)
    return behaviour


def _option_means(rows: pd.DataFrame) -> pd.Series:
    """The mean of each ``OPTION_BEHAVIOUR`` column over ``rows``, under its printed name; NaN for a column an older
    seeds table lacks."""
    return pd.Series({title: rows[column].mean() if column in rows else float("nan")
                      for column, title in OPTION_BEHAVIOUR.items()})


def across_references(runs: dict[str, str], profile: str = "class", results: Path = RESULTS_DIR) -> pd.DataFrame | None:
    """Runs from different pi_refs side by side, each measured against its own (notebook 07 section 3, "Does a
    sloppier demonstrator leave the draws more to add?"). Per label, in the order of ``runs``: the run, its pi_ref's
    greedy test success, the seeds' mean and spread (std, ddof=0), the gain over that pi_ref, and the option columns
    (an option clicked, every value right: on the test goals that ask for one) of pi_ref and of the seeds. Test only:
    a seeds table's val success is the last periodic evaluation's, on fewer goals than pi_ref's in its metrics.json
    (section 3's per-goal outcomes pair the two splits). None while any run's seeds table is not committed."""
    rows = []
    for label, name in runs.items():
        path = Path(results) / f"{name}_{profile}_seeds.csv"
        if not path.exists():
            return None
        seeds = pd.read_csv(path)
        ref, trained = seeds[seeds["objective"] == "pi_ref"], seeds[seeds["objective"] != "pi_ref"]
        if ref.empty or trained.empty:
            raise ValueError(f"run {name!r} needs a pi_ref row and trained rows in {path}")
        start, end = ref["test_success"].iloc[0], trained["test_success"].mean()
        row = {"label": label, "run": name, "seeds": len(trained), "π_ref test success": start, "test success": end,
               "std over seeds": trained["test_success"].std(ddof=0), "gain over π_ref": end - start}
        ref_means, trained_means = _option_means(ref.iloc[:1]), _option_means(trained)
        for title in (OPTION_BEHAVIOUR[c] for c in ("test_option_clicked", "test_options_right")):
            row[f"π_ref: {title}"], row[title] = ref_means[title], trained_means[title]
        rows.append(row)
    return pd.DataFrame(rows).set_index("label")

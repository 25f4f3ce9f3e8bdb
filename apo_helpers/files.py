"""Safe file writing shared by every layer: a crash mid-write never leaves half a file."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def atomic_write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file in the same folder and an atomic rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)  # mkstemp creates 0600 files
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def merge_csv_rows(path: Path, rows: list[dict], keys: list[str]) -> None:
    """Add ``rows`` to the CSV table at ``path``, replacing rows that agree on every column in ``keys``, sorted by
    the keys (numbers by value, before text).

    The read-merge-write runs under an exclusive lock on ``<path>.lock``, so processes that each add their rows
    (a sweep split over several processes) never lose one another's; the write itself is atomic."""
    import csv
    import fcntl
    import io

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(path.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        old = list(csv.DictReader(io.StringIO(path.read_text()))) if path.exists() else []
        new_keys = {tuple(str(r[k]) for k in keys) for r in rows}
        kept = [r for r in old if tuple(r[k] for k in keys) not in new_keys]
        columns = list(dict.fromkeys([c for r in kept + rows for c in r]))
        merged = sorted(kept + [{c: str(v) for c, v in r.items()} for r in rows],
                        key=lambda r: tuple(_order(r[k]) for k in keys))
        out = io.StringIO()
        writer = csv.DictWriter(out, columns, restval="", lineterminator="\n")  # quotes values with commas
        writer.writeheader()
        writer.writerows(merged)
        atomic_write_text(path, out.getvalue())


def _order(value: str) -> tuple:
    """Sort key of one CSV cell: numbers by value (300 after 1200 would be wrong as text), then text."""
    try:
        return (0, float(value), "")
    except ValueError:
        return (1, 0.0, value)

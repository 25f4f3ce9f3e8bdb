"""``make report``: execute the numbered notebooks in order and export them as HTML (notebook 07 explains it).

Each notebook runs in its own kernel in ``notebooks/`` (so relative paths behave as in class), its outputs and
widget state are written back into the ``.ipynb``, and the first failing cell stops the run with the notebook and
the cell named. The HTML files and an index land in ``report/``.
"""

from __future__ import annotations

import html
import os
import subprocess
import sys
import time
from pathlib import Path

from ..config import PROFILE_ENV_VAR, PROJECT_ROOT, get_profile

NOTEBOOK_DIR = PROJECT_ROOT / "notebooks"
REPORT_DIR = PROJECT_ROOT / "report"


class NotebookFailed(RuntimeError):
    """A cell raised; the message names the notebook, the cell and the error."""


def notebooks(directory: Path = NOTEBOOK_DIR) -> list[Path]:
    """The numbered notebooks, in order; a script without its notebook yet gets one (jupytext pairs them)."""
    scripts = [p for p in sorted(directory.glob("[0-9][0-9]_*.py")) if not p.with_suffix(".ipynb").exists()]
    if scripts:
        subprocess.run([sys.executable, "-m", "jupytext", "--to", "ipynb", "--quiet", *map(str, scripts)], check=True)
    return sorted(directory.glob("[0-9][0-9]_*.ipynb"))


def execute_notebook(path: Path, timeout: int = 1800) -> float:
    """Run every cell of ``path`` in a fresh kernel and save the outputs in place; returns the seconds it took."""
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}},
                            store_widget_state=True)
    start = time.perf_counter()
    try:
        client.execute()
    except CellExecutionError as e:
        index = next((i for i, c in enumerate(nb.cells) if c.get("cell_type") == "code" and
                      any(o.get("output_type") == "error" for o in c.get("outputs", []))), None)
        nbformat.write(nb, path)  # keep what ran, so the failure can be inspected
        first_line = nb.cells[index].source.splitlines()[0] if index is not None and nb.cells[index].source else ""
        raise NotebookFailed(f"{path.name}: cell {index} ({first_line!r}) failed:\n{e}") from None
    nbformat.write(nb, path)
    return time.perf_counter() - start


def export_html(paths: list[Path], out_dir: Path = REPORT_DIR) -> Path:
    """One HTML page per notebook (widget state embedded) plus ``index.html``; returns the index."""
    import nbformat
    from nbconvert import HTMLExporter

    out_dir.mkdir(parents=True, exist_ok=True)
    exporter = HTMLExporter(template_name="lab")
    links = []
    for path in paths:
        body, _ = exporter.from_notebook_node(nbformat.read(path, as_version=4))
        target = out_dir / f"{path.stem}.html"
        target.write_text(body)
        links.append(f'<li><a href="{target.name}">{html.escape(path.stem)}</a></li>')
    index = out_dir / "index.html"
    index.write_text("<!doctype html><meta charset='utf-8'><title>RAGEN + A*PO on WebShop: report</title>"
                     f"<h1>RAGEN + A*PO on WebShop</h1><p>Profile: {html.escape(get_profile().name)}</p>"
                     f"<ol>{''.join(links)}</ol>\n")
    return index


def build_report(only: list[str] | None = None) -> Path:
    """Execute the notebooks (all, or those whose name starts with one of ``only``) and export the report."""
    os.environ.setdefault(PROFILE_ENV_VAR, get_profile().name)
    paths = [p for p in notebooks() if not only or any(p.name.startswith(o) for o in only)]
    if not paths:
        raise ValueError(f"no notebooks match {only} in {NOTEBOOK_DIR}")
    _sync(paths)  # an edited script flows into its notebook before it runs
    for path in paths:
        print(f"executing {path.name} (profile {os.environ[PROFILE_ENV_VAR]}) ...", flush=True)
        seconds = execute_notebook(path)
        print(f"  done in {seconds:.0f} s", flush=True)
    _sync(paths)
    index = export_html(notebooks())
    print(f"report written to {index}")
    return index


def _sync(paths: list[Path]) -> None:
    """Bring each notebook and its py:percent script in step (jupytext's CLI: the newer file wins)."""
    subprocess.run([sys.executable, "-m", "jupytext", "--sync", "--quiet", *map(str, paths)], check=True)

"""The repository's own rules: data reproducible, notebooks paired and executed, dependencies in step, no pickle."""

import json
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import nbformat
import pytest

from apo_helpers.config import DATA_DIR, PROJECT_ROOT
from apo_helpers.webshop.catalog import CATALOG_FILE, GOALS_FILE, catalog_to_json, generate_catalog

NOTEBOOKS = sorted((PROJECT_ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))


def test_committed_data_is_a_byte_identical_regeneration():
    catalog_text, goals_text = catalog_to_json(generate_catalog())
    assert (DATA_DIR / CATALOG_FILE).read_text() == catalog_text
    assert (DATA_DIR / GOALS_FILE).read_text() == goals_text


def _requirement_names(requirements):
    return {re.split(r"[<>=!~\[ ;]", r.strip(), maxsplit=1)[0].lower().replace("_", "-") for r in requirements}


def test_environment_yml_names_the_same_dependencies_as_pyproject():
    project = tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text())["project"]
    wanted = {r.replace(" ", "") for r in project["dependencies"] + project["optional-dependencies"]["dev"]}
    lines = (PROJECT_ROOT / "environment.yml").read_text().splitlines()
    pip_section = [l.strip()[2:].strip() for l in lines[[l.strip() for l in lines].index("- pip:") + 1:]
                   if l.strip().startswith("- ")]
    conda_pins = {r.replace(" ", "") for r in pip_section if not r.startswith("-e")}
    assert conda_pins == wanted, f"only in environment.yml: {conda_pins - wanted}; only in pyproject: {wanted - conda_pins}"
    assert "torch==2.13.0" in wanted
    # the stack that decides the numbers is pinned exactly: a new release may train another tokenizer here
    assert {r.split("==")[0] for r in wanted if "==" in r} >= {"torch", "transformers", "tokenizers"}


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_is_paired_and_in_sync(notebook):
    script = notebook.with_suffix(".py")
    assert script.exists(), f"{notebook.name} has no paired {script.name}: run `make sync`"
    rendered = subprocess.run([sys.executable, "-m", "jupytext", "--to", "py:percent", "-o", "-", str(notebook)],
                              capture_output=True, text=True, check=True, cwd=PROJECT_ROOT).stdout
    assert rendered == script.read_text(), f"{notebook.name} and {script.name} differ: run `make sync`"


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_is_committed_with_outputs(notebook):
    cells = json.loads(notebook.read_text())["cells"]
    code = [c for c in cells if c["cell_type"] == "code"]
    assert code and all(c.get("execution_count") for c in code), f"{notebook.name}: run `make report` before committing"
    assert not any(o.get("output_type") == "error" for c in code for o in c.get("outputs", []))


def test_environment_package_imports_no_torch():
    code = "import sys, apo_helpers.webshop, apo_helpers.analysis.evaluate; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_no_pickle_and_safe_torch_load():
    for path in (PROJECT_ROOT / "apo_helpers").rglob("*.py"):
        text = path.read_text()
        assert not re.search(r"^\s*(import pickle|from pickle|import dill)", text, re.M), path
        for call in re.findall(r"torch\.load\([^)]*\)", text):
            assert "weights_only=True" in call, f"{path}: {call}"


def test_readme_tables_match_the_committed_results():
    from apo_helpers.analysis.readme import DOCUMENTS, render_readme

    for path in DOCUMENTS:
        text = path.read_text()
        assert render_readme(text) == text, f"{path.name} tables are stale: run `python -m apo_helpers readme`"


def test_every_rendered_table_sits_in_exactly_one_document():
    """A table moved between the README and the experiment log must not be lost or kept twice."""
    from apo_helpers.analysis.readme import DOCUMENTS, SECTIONS, section_names

    names = [name for path in DOCUMENTS for name in section_names(path.read_text())]
    assert sorted(names) == sorted(SECTIONS), "each of SECTIONS must appear once across README.md and docs/"


def test_only_the_class_profile_writes_the_committed_figures():
    from apo_helpers.config import FIGURES_DIR, RUNS_DIR, figures_dir

    assert figures_dir("class") == FIGURES_DIR
    assert figures_dir("ci") == RUNS_DIR / "figures_ci" and figures_dir("gpu") == RUNS_DIR / "figures_gpu"


LAYERS = ["webshop", "policy", "apo", "analysis"]
"""The package's data flow, top to bottom of DESIGN's layout: each layer may import the ones before it (and the
shared config.py / files.py), never one after it; runs.py, bench.py and __main__.py sit above them all."""


def test_imports_only_point_down_the_data_flow():
    package = PROJECT_ROOT / "apo_helpers"
    upward = []
    for layer, name in enumerate(LAYERS):
        for path in sorted((package / name).glob("*.py")):
            for target in re.findall(r"^\s*from \.\.(\w+)", path.read_text(), re.M):  # lazy imports count too
                if target in LAYERS and LAYERS.index(target) > layer:
                    upward.append(f"{path.relative_to(package)} imports {target}")
    assert upward == []


def _nbval_distribution():
    """The pytest-xdist options of `make nbval`'s pytest command (``-n N --dist MODE``)."""
    recipe = re.search(r"^nbval:.*?\n((?:\t.*\n?)+)", (PROJECT_ROOT / "Makefile").read_text(), re.M).group(1)
    command = " ".join(line.strip().rstrip("\\") for line in recipe.splitlines())
    options = re.search(r"-m pytest .*?(-n \d+ --dist \w+)", command)
    assert options, f"make nbval should run the notebooks on pytest-xdist workers (-n N --dist MODE): {command}"
    return options.group(1).split()


def test_nbval_runs_each_notebooks_cells_in_order_on_one_worker(tmp_path):
    """`make nbval` runs notebooks two at a time; a notebook's cells share one kernel, so they must stay together and
    in order (xdist's plain `load` mode scatters them and later cells fail on names never defined). The two kernels
    start together, so they talk over IPC sockets of their own (notebooks/conftest.py): over TCP one of them could lose
    a port it was given to the other and die at start-up."""
    shutil.copy(PROJECT_ROOT / "notebooks" / "conftest.py", tmp_path)
    over_ipc = ("from ipykernel import get_connection_info\n"
                "assert get_connection_info(unpack=True)['transport'] == 'ipc'")
    for name in ("a", "b"):
        cells = [nbformat.v4.new_code_cell(f"{over_ipc}\nseen = [0]")]
        cells += [nbformat.v4.new_code_cell(f"assert seen == list(range({i}))\nseen.append({i})") for i in range(1, 5)]
        nbformat.write(nbformat.v4.new_notebook(cells=cells), tmp_path / f"{name}.ipynb")
    out = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--nbval-lax", "-v",
                          *_nbval_distribution(), "a.ipynb", "b.ipynb"],
                         capture_output=True, text=True, cwd=tmp_path).stdout
    for name in ("a", "b"):
        # xdist names a notebook's cells "a::ipynb::Cell 0"
        passed = re.findall(rf"\[(gw\d+)\] .*PASSED {name}(?:\.|::)ipynb::Cell (\d+)", out)
        assert [int(cell) for _, cell in passed] == list(range(5)), out
        assert len({worker for worker, _ in passed}) == 1, out


def test_xdist_keeps_a_group_on_one_worker(tmp_path):
    """`make unit` runs `--dist loadgroup` so that the tests sharing SmolLM2 load it in one worker; some pytest and
    pytest-xdist releases together drop the groups without a word (every test then runs wherever it lands)."""
    body = "import pytest\n\n{mark}@pytest.mark.parametrize('i', range(6))\ndef test_{name}(i):\n    pass\n"
    (tmp_path / "test_grouped.py").write_text(body.format(mark="@pytest.mark.xdist_group('one')\n", name="g"))
    (tmp_path / "test_free.py").write_text(body.format(mark="", name="f"))
    out = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-n", "2", "--dist", "loadgroup",
                          "-v", str(tmp_path)], capture_output=True, text=True, cwd=tmp_path).stdout
    workers = set(re.findall(r"\[(gw\d)\] .* PASSED .*test_grouped\.py", out))
    assert len(re.findall(r"PASSED .*test_grouped\.py", out)) == 6 and len(workers) == 1, out

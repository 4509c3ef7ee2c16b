"""The tutorial notebooks: committed executed, and they still run with the installed package."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

TUTORIALS = sorted((Path(__file__).parents[1] / "tutorials").glob("*.ipynb"))
# Guards against a hung kernel only, far above normal: the quick start's full-length training cell once took 24 minutes
# on a shared 2-core machine, past the former 900 s limit.
CELL_TIMEOUT_S = 3 * 60 * 60
# nbclient waits 60 s by default for a new kernel to answer; a loaded machine can take longer to start one.
KERNEL_STARTUP_TIMEOUT_S = 20 * 60
# nbclient waits 4 s by default for a cell's last outputs after its reply; slow delivery would drop them.
IOPUB_TIMEOUT_S = 5 * 60
# Cells that cannot run here (e.g. the real Census on GPUs) carry this tag; nbclient skips them too.
SKIP_TAG = "skip-execution"
# A notebook's settings live in one code cell with this tag (papermill's convention).
PARAMETERS_TAG = "parameters"
# Shorter settings for the test's run, assigned in a cell inserted after the notebook's parameters cell, as papermill
# does: the run checks that every cell still works with the installed package, while the committed outputs (checked by
# `test_tutorial_is_committed_executed`) come from the full settings. This keeps the two longest notebooks to a few
# minutes of CI.
TEST_PARAMETERS = {
    "01_quickstart": {"max_epochs": 2},
    "03_scorecard": {"max_epochs": 2, "n_repeats": 1},
}


def _code_cells(notebook: nbformat.NotebookNode) -> list[nbformat.NotebookNode]:
    """Code cells that are meant to run (not tagged ``skip-execution``)."""
    return [
        cell
        for cell in notebook.cells
        if cell.cell_type == "code" and SKIP_TAG not in cell.get("metadata", {}).get("tags", [])
    ]


def _parameters_cell_index(notebook: nbformat.NotebookNode) -> int:
    """The index of the notebook's one cell tagged ``parameters``."""
    tagged = [i for i, cell in enumerate(notebook.cells) if PARAMETERS_TAG in cell.get("metadata", {}).get("tags", [])]
    assert len(tagged) == 1, f"expected one cell tagged {PARAMETERS_TAG!r}, found {len(tagged)}"
    return tagged[0]


def _notebook_settings(notebook: nbformat.NotebookNode) -> dict:
    """The names and values the notebook's parameters cell assigns (plain assignments of its settings)."""
    defined: dict = {}
    exec(notebook.cells[_parameters_cell_index(notebook)].source, defined)
    return {name: value for name, value in defined.items() if name != "__builtins__"}


def _with_test_parameters(notebook: nbformat.NotebookNode, overrides: dict) -> nbformat.NotebookNode:
    """``notebook`` with a cell assigning ``overrides`` inserted after its parameters cell, which must define them."""
    missing = sorted(set(overrides) - set(_notebook_settings(notebook)))
    assert not missing, f"the parameters cell does not define {missing}"
    index = _parameters_cell_index(notebook)
    source = "\n".join(f"{name} = {value!r}" for name, value in overrides.items())
    notebook.cells.insert(index + 1, nbformat.v4.new_code_cell(source, metadata={"tags": ["injected-parameters"]}))
    return notebook


def test_tutorials_exist() -> None:
    names = {path.name for path in TUTORIALS}
    assert {"01_quickstart.ipynb", "02_zero_shot.ipynb", "03_scorecard.ipynb"} <= names


@pytest.mark.parametrize("path", TUTORIALS, ids=lambda path: path.stem)
def test_tutorial_is_committed_executed(path: Path) -> None:
    """The docs render the committed outputs, so every code cell must have run, in order, without errors."""
    cells = _code_cells(nbformat.read(path, as_version=4))
    assert cells, f"{path.name} has no code cells"
    counts = [cell.execution_count for cell in cells]
    assert None not in counts, f"{path.name} has unexecuted cells; re-run it from a clean kernel"
    assert counts == list(range(1, len(cells) + 1)), f"{path.name} was not run top to bottom: {counts}"
    errors = [out for cell in cells for out in cell.outputs if out.output_type == "error"]
    assert not errors, f"{path.name} has error outputs: {[e.ename for e in errors]}"


@pytest.mark.parametrize("name", sorted(TEST_PARAMETERS))
def test_test_parameters_name_the_notebooks_settings(name: str) -> None:
    """The shorter settings of the test's run replace settings the notebook defines, and are smaller."""
    defined = _notebook_settings(nbformat.read(TUTORIALS[0].parent / f"{name}.ipynb", as_version=4))
    for parameter, value in TEST_PARAMETERS[name].items():
        assert parameter in defined, f"{name}'s parameters cell does not define {parameter!r}"
        assert value < defined[parameter], f"{parameter}: the test's {value} is not shorter than {defined[parameter]}"


@pytest.mark.slow
@pytest.mark.parametrize("path", TUTORIALS, ids=lambda path: path.stem)
def test_tutorial_runs(path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Execute the notebook from a clean kernel in a temporary directory (its files land there).

    A notebook in ``TEST_PARAMETERS`` runs with those shorter settings.

    The kernel computes on one thread, as the fast tests do (``conftest.py``): with other jobs on a 2-core machine,
    two OpenMP threads per process spin at every barrier, and the quick start ran several times slower. numba is
    held to one thread too: its first parallel call (in scanpy's preprocessing) resets the OpenMP thread count,
    which PyTorch shares, to the number of cores.
    """
    from nbclient import NotebookClient

    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # the kernel inherits the environment
    monkeypatch.setenv("NUMBA_NUM_THREADS", "1")

    notebook = nbformat.read(path, as_version=4)
    if path.stem in TEST_PARAMETERS:
        notebook = _with_test_parameters(notebook, TEST_PARAMETERS[path.stem])
    client = NotebookClient(
        notebook,
        timeout=CELL_TIMEOUT_S,
        startup_timeout=KERNEL_STARTUP_TIMEOUT_S,
        iopub_timeout=IOPUB_TIMEOUT_S,
        # Kill the throwaway kernel at the end instead of asking it to shut down: after an error it may still be
        # busy, and nbclient's graceful-shutdown clean-up then failed with "'NoneType' object has no attribute
        # 'cleanup_resources'", hiding the real error.
        shutdown_kernel="immediate",
        kernel_name="python3",
        resources={"metadata": {"path": str(tmp_path)}},
    )
    client.execute()  # raises CellExecutionError, with the failing cell and traceback, on any error
    assert all(cell.execution_count is not None for cell in _code_cells(notebook))

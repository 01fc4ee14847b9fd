"""Every parameter of every numbered notebook has a description in ``papermill --help-notebook`` (issue 71):
the comment after it in the parameters cell, which papermill shows as the parameter's help."""
from pathlib import Path

import papermill as pm
import pytest

NOTEBOOKS = sorted(Path(__file__).resolve().parents[1].glob("notebooks/[0-9][0-9]_*.ipynb"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_parameter_has_a_description(path):
    params = pm.inspect_notebook(str(path))
    assert params, f"{path.name}: no parameters cell"
    missing = [name for name, p in params.items() if not (p.get("help") or "").strip()]
    assert not missing, f"{path.name}: parameters without a description (a comment after the value): {missing}"


def test_every_numbered_notebook_is_found():
    assert [p.name[:2] for p in NOTEBOOKS] == [f"{i:02d}" for i in range(13)]

"""The kit runs from a git checkout (attn_kit/checkout.py): a copy of the packages without the
checkout's files around them (what a non-editable ``pip install .`` gives) says so in one line."""
import os
import shutil
import subprocess
import sys

import pytest
from conftest import REPO, assert_one_error_line


@pytest.fixture(scope="module")
def installed_copy(tmp_path_factory):
    """attn_kit and attn_plugin alone, as site-packages would hold them: no recipes/, data/, runs/."""
    root = tmp_path_factory.mktemp("site-packages")
    for package in ("attn_kit", "attn_plugin"):
        shutil.copytree(REPO / package, root / package, ignore=shutil.ignore_patterns("__pycache__"))
    return root


@pytest.mark.parametrize("command", [["attn_kit.recipes.cost_report"], ["attn_kit.recipes.translation", "--help"]],
                         ids=["training_cost", "wmt14_help"])
def test_a_command_without_its_checkout_says_so_in_one_line(installed_copy, tmp_path, command):
    env = {**os.environ, "PYTHONPATH": str(installed_copy)}
    proc = subprocess.run([sys.executable, "-m", *command], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=300)
    assert_one_error_line(proc, str(installed_copy / "recipes" / "configs"), "runs from a git checkout",
                          "pip install -e .")

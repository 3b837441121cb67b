"""The examples in python/examples/ run as the README shows them."""

import importlib.util
import pathlib

import pytest

from forkbox import Forkbox

EXAMPLES = pathlib.Path(__file__).resolve().parent.parent / "examples"

pytestmark = pytest.mark.integration


def load(name: str):
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(module)
    return module


def test_tree_search_keeps_the_best_branch_and_closes_the_others(fb: Forkbox):
    tree_search = load("tree_search")
    actions = ["echo 3 >> /work/moves", "echo 7 >> /work/moves", "echo -2 >> /work/moves",
               "rm -f /work/score.py"]
    assert tree_search.search(actions, depth=3, fb=fb) == (21, ["7", "7", "7"])
    assert fb.sandboxes() == []  # every branch, the winner too, is closed

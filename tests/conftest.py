"""Shared fixtures: the data directory, and skipping of CUDA tests without a GPU."""

import os
import tempfile
from pathlib import Path

import pytest
import torch

HERE = Path(__file__).resolve().parent
SHARED_DATA = Path(os.environ.get("TORCHCUT_DATA") or HERE.parent.parent / "shared" / "data")  # empty = unset
# torch.compile's on-disk caches key a graph by its calls, not by what the compiled ops return: a cache
# written by another build of torchcut (another number of counters) would replay stale output sizes.
# The tests compile into a cache of their own run.
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", tempfile.mkdtemp(prefix="torchcut-inductor-"))


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The folder of test data named by ``$TORCHCUT_DATA``; skip when it does not exist."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"no test data at {SHARED_DATA}: set TORCHCUT_DATA to the test data folder")
    return SHARED_DATA

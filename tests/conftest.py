"""Shared fixtures: the data directory, and skipping of CUDA tests without a GPU."""

import os
from pathlib import Path

import pytest
import torch

HERE = Path(__file__).resolve().parent
SHARED_DATA = Path(os.environ.get("TORCHCUT_DATA", HERE.parent.parent / "shared" / "data"))


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The folder of test data (``$TORCHCUT_DATA``, else ``../shared/data``); skip when absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"test data folder {SHARED_DATA} not found (set TORCHCUT_DATA)")
    return SHARED_DATA

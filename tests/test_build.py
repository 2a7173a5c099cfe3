"""``python -m torchcut.build``: names checked, one extension in process, several in parallel processes."""

from __future__ import annotations

import subprocess
import sys

import torch

from torchcut import _ext, build


def test_help_and_unknown_names(capsys):
    assert build.main(["--help"]) == 0
    assert "python -m torchcut.build" in capsys.readouterr().out
    assert build.main(["torchcut_cpu", "torchcut_nope"]) == 2
    err = capsys.readouterr().err
    assert "unknown extension(s) torchcut_nope" in err and "torchcut_grid" in err


def test_one_extension_in_process(capsys):
    assert build.main(["torchcut_cpu", "torchcut_cpu"]) == 0  # named twice, built once
    out = capsys.readouterr().out
    assert out.count("built torchcut_cpu in ") == 1
    assert str(_ext.cache_dir("torchcut_cpu")) in out


def test_several_in_parallel_processes():
    """Each build's output comes back whole; a build that cannot be done (CUDA on a CPU-only torch)
    fails alone and sets the exit code."""
    p = subprocess.run([sys.executable, "-m", "torchcut.build", "torchcut_cpu", "torchcut_grid"],
                       capture_output=True, text=True, timeout=900)
    assert "built torchcut_cpu in " in p.stdout
    if torch.version.cuda is None:
        assert p.returncode == 1
        assert "FAILED torchcut_grid: RuntimeError: " in p.stdout and "has no CUDA support" in p.stdout
        assert "built 1 of 2 extensions in " in p.stdout
    else:
        assert p.returncode == 0, p.stdout[-3000:]
        assert "built torchcut_grid in " in p.stdout and "built 2 of 2 extensions in " in p.stdout

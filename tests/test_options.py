"""torchcut._options: keywords passed on to a max-flow backend are checked at the public function."""

import pytest
import torch

import torchcut
from torchcut.solvers._options import backend_options, check_options


def test_backend_options_follow_the_backends():
    assert backend_options("cpu", "reference") == ("reference", ("max_iter", "relabel_period", "on_relabel"))
    assert backend_options("cpu", "cpu") == ("cpu", ("threads", "algorithm"))
    from torchcut.solvers import cuda

    names = tuple(cuda.OPTIONS)
    assert "tile_x" in names and "max_cycles" in names
    # general graphs: the general solver's options, then the grid solver's (lattice graphs go there)
    assert backend_options("cpu", "reference", "csr") == ("reference", ("max_iter", "relabel_period", "on_relabel"))
    assert backend_options("cpu", "cpu", "csr") == ("cpu", ("threads", "algorithm"))


def test_check_options_for_maxflow():
    # maxflow() passes **options to the backend: the check it can call names maxflow()
    check_options(
        torchcut.maxflow, {"lattice": False, "max_iter": 9}, "cpu", "reference", layout="csr", also=("lattice",)
    )
    with pytest.raises(
        TypeError,
        match=r"^maxflow\(\): unexpected keyword argument 'max_iters' \(did you mean "
        r"'max_iter'\?\)\. maxflow\(\) takes graph, backend; further keywords go to "
        r"the max-flow backend, here 'reference' \(backend='reference' on cpu\), "
        r"which takes lattice, max_iter, relabel_period, on_relabel$",
    ):
        check_options(torchcut.maxflow, {"max_iters": 9}, "cpu", "reference", layout="csr", also=("lattice",))
    with pytest.raises(TypeError, match=r"^maxflow\(\): keyword argument 'iters' is an option of the 'cuda' backend"):
        check_options(torchcut.maxflow, {"iters": 2}, torch.device("cpu"), "cpu", layout="csr")
    with pytest.raises(ValueError, match=r"backend: expected one of"):
        check_options(torchcut.maxflow, {"threads": 2}, "cpu", "gpu")
    check_options(torchcut.maxflow, {}, "cpu", "gpu")  # nothing to check: no backend is picked

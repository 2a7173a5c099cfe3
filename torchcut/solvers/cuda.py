"""CUDA backend (placeholder until the kernels land)."""


def load_error():
    """Why the CUDA extension cannot be used, or None when it can."""
    return "the CUDA kernels are not built in this version"

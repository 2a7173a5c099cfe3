"""Standard images for examples and tests, found locally or downloaded once and checked.

A file is looked for, in order:

1. in the folder named by the environment variable ``TORCHCUT_DATA`` (the test data folder, with
   the files at the paths of :data:`REGISTRY`: ``middlebury/tsukuba/scene1.row3.col3.ppm``, ...),
2. in the cache folder ``$TORCHCUT_CACHE/data`` (default ``~/.cache/torchcut/data``),
3. downloaded from its original site into the cache, when downloads are allowed (the ``download``
   argument, and the environment variable ``TORCHCUT_NO_DOWNLOAD`` unset or ``0``).

Every file's SHA-256 checksum is verified, whichever way it was found; a download that does not match
is deleted. Nothing is ever downloaded without a checksum to verify.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import urllib.request
from pathlib import Path

__all__ = ["REGISTRY", "DatasetNotFoundError", "fetch", "tsukuba", "tsukuba_pair", "cache_dir", "data_dir", "sha256"]

_MIDDLEBURY_2001 = "https://vision.middlebury.edu/stereo/data/scenes2001/data/"

#: name -> (URL, SHA-256). Names are paths relative to the data folder.
REGISTRY: dict[str, tuple[str, str]] = {
    "middlebury/tsukuba/scene1.row3.col3.ppm": (
        _MIDDLEBURY_2001 + "tsukuba/scene1.row3.col3.ppm",
        "1d326401c70e4bce95f0415a612dd00fa2984db89754f28d490b816aa731361a",
    ),
    "middlebury/tsukuba/scene1.row3.col4.ppm": (
        _MIDDLEBURY_2001 + "tsukuba/scene1.row3.col4.ppm",
        "c8048c2e0d834488adfae1c2525f4c004907b369dc90730ca11bf1f6dd8d925d",
    ),
    "middlebury/tsukuba/truedisp.row3.col3.pgm": (
        _MIDDLEBURY_2001 + "tsukuba/truedisp.row3.col3.pgm",
        "3192e1b8a1ad50fa6ac743cbe93aea54066bc93d2ebee432a04e7cd759450296",
    ),
}

TSUKUBA_LEFT = "middlebury/tsukuba/scene1.row3.col3.ppm"
TSUKUBA_RIGHT = "middlebury/tsukuba/scene1.row3.col4.ppm"
TSUKUBA_TRUTH = "middlebury/tsukuba/truedisp.row3.col3.pgm"


class DatasetNotFoundError(FileNotFoundError):
    """A registered file is in no local folder and could not be downloaded.

    Examples
    --------
    >>> issubclass(DatasetNotFoundError, FileNotFoundError)  # ``except FileNotFoundError`` catches it
    True
    """


def data_dir() -> Path | None:
    """The local data folder named by ``$TORCHCUT_DATA``, or None when the variable is unset.

    Examples
    --------
    >>> import os
    >>> data_dir() is None or data_dir() == Path(os.environ["TORCHCUT_DATA"]).expanduser()
    True
    """
    value = os.environ.get("TORCHCUT_DATA", "")
    return Path(value).expanduser() if value else None


def cache_dir() -> Path:
    """The download cache: ``$TORCHCUT_CACHE/data``, default ``~/.cache/torchcut/data``.

    Examples
    --------
    >>> cache_dir().name
    'data'
    """
    root = os.environ.get("TORCHCUT_CACHE", "")
    return (Path(root).expanduser() if root else Path.home() / ".cache" / "torchcut") / "data"


def sha256(path) -> str:
    """Hex SHA-256 digest of a file.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "x"; _ = p.write_bytes(b"abc")
    >>> sha256(p)[:16]
    'ba7816bf8f01cfea'
    """
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _downloads_allowed(download: bool | None) -> bool:
    if download is not None:
        return bool(download)
    return os.environ.get("TORCHCUT_NO_DOWNLOAD", "0") in ("", "0")


def _download(url: str, dest: Path, digest: str, timeout: float) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=dest.name + ".", suffix=".part", dir=dest.parent)
    try:
        with os.fdopen(fd, "wb") as out, urllib.request.urlopen(url, timeout=timeout) as resp:
            shutil.copyfileobj(resp, out)
        got = sha256(tmp)
        if got != digest:
            raise ValueError(f"download of {url}: expected SHA-256 {digest}, got {got}; the file was discarded")
        os.replace(tmp, dest)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def fetch(name: str, *, download: bool | None = None, timeout: float = 30.0) -> Path:
    """Path of a registered data file: local folder, then cache, then a checked download.

    Parameters
    ----------
    name : str
        A key of :data:`REGISTRY`, e.g. ``"middlebury/tsukuba/scene1.row3.col3.ppm"``.
    download : bool, optional
        Allow a download when the file is not found locally. Default: allowed unless the environment
        variable ``TORCHCUT_NO_DOWNLOAD`` is set to something other than ``0``.
    timeout : float
        Seconds to wait for the server.

    Returns
    -------
    pathlib.Path
        A file whose SHA-256 matches the registry.

    Raises
    ------
    DatasetNotFoundError
        Not found locally and not downloadable (downloads disabled, no network, ...).
    ValueError
        ``name`` is not registered, or a local or downloaded file has the wrong checksum.

    Examples
    --------
    >>> try:
    ...     path = fetch("middlebury/tsukuba/scene1.row3.col3.ppm", download=False)
    ... except DatasetNotFoundError:
    ...     path = None
    >>> path is None or path.name == "scene1.row3.col3.ppm"
    True
    """
    if name not in REGISTRY:
        raise ValueError(f"name: expected one of {sorted(REGISTRY)}, got {name!r}")
    url, digest = REGISTRY[name]
    local = data_dir()
    if local is not None and (local / name).is_file():
        path = local / name
        got = sha256(path)
        if got != digest:
            raise ValueError(
                f"TORCHCUT_DATA: {path} has SHA-256 {got}, expected {digest} (a different or damaged file)"
            )
        return path
    cached = cache_dir() / name
    if cached.is_file():
        if sha256(cached) == digest:
            return cached
        cached.unlink()  # damaged or partial: fetch it again below
    looked = ([f"{local / name} (TORCHCUT_DATA)"] if local is not None else ["TORCHCUT_DATA (unset)"]) + [
        f"{cached} (cache)"
    ]
    if not _downloads_allowed(download):
        raise DatasetNotFoundError(
            f"{name}: not found in {', '.join(looked)}, and downloads are disabled; set TORCHCUT_DATA to a "
            "folder holding it, or allow the download"
        )
    try:
        _download(url, cached, digest, timeout)
    except ValueError:
        raise
    except OSError as exc:  # URLError, HTTPError, timeouts, disk errors
        raise DatasetNotFoundError(
            f"{name}: not found in {', '.join(looked)}, and the download from {url} failed: {exc}"
        ) from exc
    return cached


def tsukuba(*, download: bool | None = None):
    """The left view of Middlebury's Tsukuba stereo pair, as a uint8 ``[288, 384, 3]`` numpy array.

    Please cite Scharstein and Szeliski (IJCV 2002) when you publish results on it; the scene is from
    the University of Tsukuba (Nakamura et al. 1996).

    Parameters
    ----------
    download : bool, optional
        See :func:`fetch`.

    Raises
    ------
    DatasetNotFoundError
        When the image is nowhere to be found (see :func:`fetch`).

    Examples
    --------
    >>> try:
    ...     image = tsukuba(download=False)
    ... except DatasetNotFoundError:
    ...     image = None
    >>> image is None or image.shape == (288, 384, 3)
    True
    """
    import numpy as np
    from PIL import Image

    with Image.open(fetch(TSUKUBA_LEFT, download=download)) as im:
        return np.array(im.convert("RGB"))


def tsukuba_pair(*, download: bool | None = None):
    """Middlebury's Tsukuba stereo pair and the left view's true disparities.

    Returns ``(left, right, truth)``: uint8 ``[288, 384, 3]`` views (the standard pair: column 3 is
    the left view, column 4 the right one) and float32 ``[288, 384]`` disparities in pixels (the
    file's grey levels divided by 16), 0 where unknown (an 18-pixel border). Cite as for
    :func:`tsukuba`.

    Parameters
    ----------
    download : bool, optional
        Whether a missing file may be downloaded (default as in :func:`fetch`).

    Raises
    ------
    DatasetNotFoundError
        When one of the three files is neither local nor downloadable.

    Examples
    --------
    >>> try:
    ...     left, right, truth = tsukuba_pair(download=False)
    ... except DatasetNotFoundError:
    ...     left = right = truth = None
    >>> truth is None or (right.shape == (288, 384, 3) and float(truth.max()) == 14.0)
    True
    """
    import numpy as np
    from PIL import Image

    views = []
    for name in (TSUKUBA_LEFT, TSUKUBA_RIGHT):
        with Image.open(fetch(name, download=download)) as im:
            views.append(np.array(im.convert("RGB")))
    with Image.open(fetch(TSUKUBA_TRUTH, download=download)) as im:
        truth = np.asarray(im, dtype=np.float32) / 16.0
    return views[0], views[1], truth

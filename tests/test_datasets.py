"""torchcut.datasets: local folder, cache, checked download (tested through file:// URLs, no network)."""

import hashlib
import urllib.request

import numpy as np
import pytest

from torchcut import datasets

NAME = "middlebury/tsukuba/scene1.row3.col3.ppm"


@pytest.fixture
def isolated(tmp_path, monkeypatch):
    """No TORCHCUT_DATA, an empty cache under tmp_path, downloads allowed by the environment."""
    monkeypatch.delenv("TORCHCUT_DATA", raising=False)
    monkeypatch.delenv("TORCHCUT_NO_DOWNLOAD", raising=False)
    monkeypatch.setenv("TORCHCUT_CACHE", str(tmp_path / "cache"))
    return tmp_path


def register(monkeypatch, tmp_path, payload: bytes, digest: str | None = None, name="test/blob.bin"):
    """Put a file behind a file:// URL and register it under ``name``."""
    src = tmp_path / "server" / "blob.bin"
    src.parent.mkdir(parents=True, exist_ok=True)
    src.write_bytes(payload)
    digest = digest or hashlib.sha256(payload).hexdigest()
    monkeypatch.setitem(datasets.REGISTRY, name, (src.as_uri(), digest))
    return name, src, digest


def test_registry_checksums_match_the_shared_data(shared_data):
    sums = {}
    for line in (shared_data / "SHA256SUMS").read_text().splitlines():
        digest, path = line.split(maxsplit=1)
        sums[path.removeprefix("./")] = digest
    for name, (url, digest) in datasets.REGISTRY.items():
        assert sums[name] == digest, name
        assert url.startswith("https://vision.middlebury.edu/stereo/data/scenes2001/")


def test_local_folder_from_the_environment(shared_data, monkeypatch, tmp_path):
    monkeypatch.setenv("TORCHCUT_DATA", str(shared_data))
    monkeypatch.setenv("TORCHCUT_CACHE", str(tmp_path / "cache"))
    path = datasets.fetch(NAME, download=False)
    assert path == shared_data / NAME
    image = datasets.tsukuba(download=False)
    assert image.shape == (288, 384, 3) and image.dtype == np.uint8
    assert not (tmp_path / "cache").exists()  # nothing copied or downloaded


def test_local_file_with_wrong_checksum_is_refused(isolated, monkeypatch):
    bad = isolated / "data" / NAME
    bad.parent.mkdir(parents=True)
    bad.write_bytes(b"not tsukuba")
    monkeypatch.setenv("TORCHCUT_DATA", str(isolated / "data"))
    with pytest.raises(
        ValueError, match=r"TORCHCUT_DATA: .*scene1.row3.col3.ppm has SHA-256 [0-9a-f]{64}, expected 1d326401"
    ):
        datasets.fetch(NAME)


def test_download_through_a_file_url_then_the_cache(isolated, monkeypatch):
    name, src, digest = register(monkeypatch, isolated, b"\x00\x01payload" * 1000)
    path = datasets.fetch(name)
    assert path == datasets.cache_dir() / name
    assert path.read_bytes() == src.read_bytes() and datasets.sha256(path) == digest
    assert not list(path.parent.glob("*.part"))

    def offline(*args, **kwargs):
        raise AssertionError("the cached copy should have been used")

    monkeypatch.setattr(urllib.request, "urlopen", offline)
    assert datasets.fetch(name) == path


def test_tsukuba_downloaded_from_a_mirror(isolated, monkeypatch, shared_data):
    url, digest = datasets.REGISTRY[NAME]
    monkeypatch.setitem(datasets.REGISTRY, NAME, ((shared_data / NAME).as_uri(), digest))
    image = datasets.tsukuba()
    assert image.shape == (288, 384, 3)
    assert (datasets.cache_dir() / NAME).is_file()


def test_download_with_wrong_checksum_is_discarded(isolated, monkeypatch):
    name, _, _ = register(monkeypatch, isolated, b"tampered", digest="0" * 64)
    with pytest.raises(
        ValueError, match=r"download of file://.*: expected SHA-256 0{64}, got [0-9a-f]{64}; the file was discarded"
    ):
        datasets.fetch(name)
    folder = datasets.cache_dir() / "test"
    assert not folder.exists() or not any(folder.iterdir())


def test_damaged_cache_is_fetched_again(isolated, monkeypatch):
    name, src, digest = register(monkeypatch, isolated, b"good bytes")
    cached = datasets.cache_dir() / name
    cached.parent.mkdir(parents=True)
    cached.write_bytes(b"half a fi")
    assert datasets.fetch(name) == cached
    assert cached.read_bytes() == b"good bytes"


def test_downloads_disabled(isolated, monkeypatch):
    name, _, _ = register(monkeypatch, isolated, b"x")
    with pytest.raises(
        datasets.DatasetNotFoundError,
        match=r"test/blob.bin: not found in TORCHCUT_DATA \(unset\), .*\(cache\), and downloads are disabled",
    ):
        datasets.fetch(name, download=False)
    monkeypatch.setenv("TORCHCUT_NO_DOWNLOAD", "1")
    with pytest.raises(datasets.DatasetNotFoundError, match="downloads are disabled"):
        datasets.fetch(name)
    assert datasets.fetch(name, download=True).is_file()  # the argument wins over the environment


def test_unreachable_server(isolated, monkeypatch):
    missing = (isolated / "nowhere" / "file.ppm").as_uri()
    monkeypatch.setitem(datasets.REGISTRY, NAME, (missing, datasets.REGISTRY[NAME][1]))
    monkeypatch.setenv("TORCHCUT_DATA", str(isolated / "empty"))
    with pytest.raises(
        datasets.DatasetNotFoundError,
        match=r"empty/middlebury/tsukuba/scene1.row3.col3.ppm \(TORCHCUT_DATA\).*the download from file://.* failed",
    ):
        datasets.tsukuba()


def test_unknown_name():
    with pytest.raises(ValueError, match=r"name: expected one of \[.*\], got 'lena.png'"):
        datasets.fetch("lena.png")


def test_cache_location(monkeypatch, tmp_path):
    monkeypatch.setenv("TORCHCUT_CACHE", str(tmp_path))
    assert datasets.cache_dir() == tmp_path / "data"
    monkeypatch.delenv("TORCHCUT_CACHE")
    assert str(datasets.cache_dir()).endswith(".cache/torchcut/data")

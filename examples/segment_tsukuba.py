"""Segment an object from seed scribbles with a graph cut: the desk lamp in Tsukuba, else the astronaut.

    python examples/segment_tsukuba.py                 # Tsukuba (full size) if found, else scikit-image's astronaut
    python examples/segment_tsukuba.py --size 256      # shrunk so the longer side is 256 pixels
    python examples/segment_tsukuba.py --image photo.png --seeds scribbles.png --out results

Which image it segments, and why, it prints first:

* **Tsukuba** (the left view of Middlebury's stereo pair; the object is the orange desk lamp), when
  :mod:`torchcut.datasets` finds it: in ``$TORCHCUT_DATA``, in the cache (``~/.cache/torchcut/data``),
  or by a download from the Middlebury site checked against its SHA-256.
* **scikit-image's astronaut** (bundled with scikit-image, no download; the object is the astronaut:
  hair, face and suit), when Tsukuba is nowhere to be found: no network, or downloads turned off
  (``--no-download`` or ``TORCHCUT_NO_DOWNLOAD=1``). The reason is printed.
* your own image, with ``--image`` and ``--seeds``.

Seeds are PNGs with values 0 (unknown), 1 (object), 2 (background), drawn by ``assets/make_seeds.py``.
Writes ``<name>_mask.png`` (object white) and ``<name>_overlay.png`` (the object in colour, its
boundary in cyan, the background dimmed to gray) into ``--out``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch
from PIL import Image

ROOT = Path(__file__).resolve().parent.parent
ASSETS = ROOT / "assets"

try:
    import torchcut
except ImportError:  # running from a checkout without installing
    sys.path.insert(0, str(ROOT))
    import torchcut

from torchcut import datasets

#: Smoothness weight the scribbles were tuned with, per image (8-connected); others get the default.
LAM = {"tsukuba": 8.0, "astronaut": 16.0}
CONNECTIVITY = 8


#: What the scribbles of each built-in image mark as the object.
OBJECT = {"tsukuba": "the orange desk lamp", "astronaut": "the astronaut (hair, face and suit)"}


def load_default(download: bool | None):
    """Tsukuba and its scribbles, or the fallback astronaut when Tsukuba is nowhere to be found; says
    which image it is, where it came from, and why."""
    try:
        path = datasets.fetch(datasets.TSUKUBA_LEFT, download=download)
    except datasets.DatasetNotFoundError as exc:
        print(f"Tsukuba not available: {exc}")
        print(
            "Segmenting scikit-image's 'astronaut' image instead (bundled with scikit-image); "
            f"object: {OBJECT['astronaut']}."
        )
        import skimage.data

        return "astronaut", skimage.data.astronaut(), ASSETS / "astronaut_seeds.png"
    print(f"Segmenting Middlebury's Tsukuba (left view, {path}); object: {OBJECT['tsukuba']}.")
    with Image.open(path) as im:
        return "tsukuba", np.array(im.convert("RGB")), ASSETS / "tsukuba_seeds.png"


def read_seeds(path: Path, shape) -> np.ndarray:
    with Image.open(path) as im:
        seeds = np.array(im)
    if seeds.ndim != 2:
        raise SystemExit(f"--seeds: expected a one-channel PNG of labels 0/1/2, got shape {seeds.shape} from {path}")
    if seeds.shape != tuple(shape):
        raise SystemExit(f"--seeds: expected the image's size {tuple(shape)}, got {seeds.shape} from {path}")
    return seeds


def resize(image: np.ndarray, seeds: np.ndarray, size: int):
    """Shrink so that the longer side is at most ``size`` (image bilinear, seeds nearest); 0 keeps the size."""
    h, w = seeds.shape
    if size <= 0 or max(h, w) <= size:
        return image, seeds
    f = size / max(h, w)
    new = (max(1, round(w * f)), max(1, round(h * f)))
    image = np.asarray(Image.fromarray(image).resize(new, Image.BILINEAR))
    seeds = np.asarray(Image.fromarray(seeds).resize(new, Image.NEAREST))
    return image, seeds


def overlay(image: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """uint8 ``[H, W, 3]``: the object as it is, the background dimmed and gray, the boundary in cyan."""
    rgb = image.float()
    if rgb.dim() == 2:
        rgb = rgb.unsqueeze(-1).expand(-1, -1, 3)
    m = mask.unsqueeze(-1)
    gray = rgb.mean(-1, keepdim=True).expand_as(rgb)
    out = torch.where(m, rgb, 0.3 * gray + 20.0)
    pad = torch.nn.functional.pad(mask[None, None].float(), (1, 1, 1, 1), mode="replicate")
    inner = -torch.nn.functional.max_pool2d(-pad, 3, stride=1)[0, 0] > 0.5  # erosion
    edge = (mask & ~inner).unsqueeze(-1)
    out = torch.where(edge, torch.tensor([0.0, 255.0, 255.0], device=rgb.device), out)
    return out.round().clamp(0, 255).to(torch.uint8)


def pick_device(parser: argparse.ArgumentParser, name) -> torch.device:
    """The ``--device`` to run on (default: CUDA when available); a device this torch cannot use ends
    the script with one line naming the option (exit code 2), as argparse does for other bad options."""
    if name is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        parser.error(f"--device: expected a torch device such as cpu or cuda, got {name!r}")
    if device.type == "cuda" and not torch.cuda.is_available():
        why = (
            "this torch is a CPU-only build; install a CUDA build from pytorch.org"
            if torch.version.cuda is None
            else "no CUDA GPU is visible"
        )
        parser.error(f"--device {name}: CUDA is not available ({why}); run with --device cpu")
    if device.type not in ("cpu", "cuda"):
        parser.error(f"--device: expected cpu or cuda, got {name!r}")
    return device


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--image", type=Path, help="image to segment (default: Tsukuba, else the astronaut)")
    p.add_argument("--seeds", type=Path, help="PNG of labels 0/1/2 the size of the image (required with --image)")
    p.add_argument("--out", type=Path, default=Path("out"), help="output folder (default: ./out)")
    p.add_argument(
        "--size", type=int, default=0, help="shrink so the longer side is at most this; 0 = full size (default)"
    )
    p.add_argument("--device", default=None, help="torch device (default: cuda when available, else cpu)")
    p.add_argument("--lam", type=float, default=None, help="smoothness weight (default: tuned per built-in image)")
    p.add_argument("--connectivity", type=int, default=CONNECTIVITY, choices=(4, 8), help="default 8")
    p.add_argument("--no-download", action="store_true", help="never download Tsukuba")
    args = p.parse_args(argv)
    device = pick_device(p, args.device)  # before any work: a device this torch cannot use ends here

    if args.image is not None:
        if args.seeds is None:
            p.error("--seeds is required with --image")
        with Image.open(args.image) as im:
            image = np.array(im.convert("RGB") if im.mode not in ("L", "RGB") else im)
        name = args.image.stem
        print(f"Segmenting {args.image}; object: what {args.seeds} marks with label 1.")
    else:
        name, image, default_seeds = load_default(False if args.no_download else None)
        args.seeds = args.seeds or default_seeds
    seeds = read_seeds(args.seeds, image.shape[:2])
    image, seeds = resize(image, seeds, args.size)

    x = torch.from_numpy(image.copy()).to(device)  # [H, W] or [H, W, 3]: the channel axis is found
    s = torch.from_numpy(seeds.copy()).to(device)
    if device.type == "cpu":  # the CPU solver is built at install and loaded at import; only a tree
        from torchcut.solvers import cpu  # without a build for this torch compiles it here, once, into a cache

        t_build = time.perf_counter()
        if cpu.load_error() is None and time.perf_counter() - t_build > 1:
            print(
                f"prepared the CPU solver in {time.perf_counter() - t_build:.0f} s (no installed build fitted "
                "this torch: compiled once into the cache; not in the time below)"
            )
    t0 = time.perf_counter()
    lam = args.lam if args.lam is not None else LAM.get(name, torchcut.energy.DEFAULT_LAM)
    mask, result = torchcut.segment(x, s, lam=lam, connectivity=args.connectivity, return_result=True)
    if device.type == "cuda":
        torch.cuda.synchronize()
    seconds = time.perf_counter() - t0
    result.verify()

    args.out.mkdir(parents=True, exist_ok=True)
    mask_path = args.out / f"{name}_mask.png"
    overlay_path = args.out / f"{name}_overlay.png"
    Image.fromarray((mask.to(torch.uint8) * 255).cpu().numpy()).save(mask_path)
    Image.fromarray(overlay(x, mask).cpu().numpy()).save(overlay_path)
    e = result.graph.energy
    print(
        f"{name}: {tuple(seeds.shape)} on {device}, lam {lam:g}, {args.connectivity}-connected, "
        f"object {OBJECT.get(name, 'from the seeds')}: {int(mask.sum())} pixels "
        f"({100 * float(mask.float().mean()):.1f}%), energy {result.flow_value / e.scale:.1f} "
        f"(cut {result.flow_value} at scale {e.scale:g}), {seconds:.2f} s, backend {result.stats.get('backend')}"
    )
    print(f"wrote {mask_path} and {overlay_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

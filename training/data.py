"""Data: ``prepare`` (detect, align, de-duplicate, refuse held-out files) and the in-memory training set.

A prepared dataset directory holds::

    prepared.json   source folder, resolution, margin, counts, refused / dropped files and why
    train.txt       file names of the training crops, one per line (row i of crops.npy)
    crops.npy       uint8 [N, R, R, 3] RGB aligned crops

Crops are aligned exactly as the runtime aligns faces (YuNet landmarks,
``streamdeid.align.align_face`` with ``AlignConfig().margin``), so the model is
trained on the framing it sees in videos. Files of the held-out evaluation
split (``evaluation.is_heldout``) are never read for training: prepare
lists them as refused, and loading a prepared set that names one raises
:class:`HeldoutError`. Training crops that are near-duplicates (dHash) of a
held-out face are dropped as well, so a re-saved copy cannot leak either.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # torch is imported where crops are loaded: `prepare` runs without it
    import torch

PREPARED_FILE = "prepared.json"
TRAIN_LIST = "train.txt"
CROPS_FILE = "crops.npy"
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".webp")


class HeldoutError(RuntimeError):
    """A file of the held-out evaluation split was given to training."""


def is_heldout(path: str | Path) -> bool:
    """``evaluation.is_heldout`` imported lazily (it is owned by the evaluation package)."""
    from evaluation.heldout import is_heldout as _is_heldout

    return _is_heldout(path)


def refuse_heldout(names: list[str]) -> None:
    bad = [n for n in names if is_heldout(n)]
    if bad:
        raise HeldoutError(f"{len(bad)} file(s) of the held-out evaluation split given to training, "
                           f"e.g. {bad[:3]}; re-run `python -m training prepare` (it excludes them)")


# ---------------------------------------------------------------------- hashing
HASH_SIDE = 16
HASH_WORDS = HASH_SIDE * HASH_SIDE // 64  # a dhash is this many uint64 words


def dhash(crop_rgb: np.ndarray, margin: float = 0.4, side: int = HASH_SIDE) -> np.ndarray:
    """Difference hash of the face box of an aligned crop -> ``side * side`` bits as uint64 words.

    Only the ArcFace template box (the middle ``1 - margin`` of the crop) is hashed: the border of
    tight source crops is replicated padding, which would make unrelated faces look alike."""
    import cv2

    r = crop_rgb.shape[0]
    b = int(round(r * margin / 2))
    grey = cv2.cvtColor(np.ascontiguousarray(crop_rgb[b:r - b, b:r - b]), cv2.COLOR_RGB2GRAY)
    small = cv2.resize(grey, (side + 1, side), interpolation=cv2.INTER_AREA).astype(np.int16)
    bits = (small[:, 1:] > small[:, :-1]).flatten()
    return np.packbits(bits).view(">u8").astype(np.uint64)


def _distances(pool: np.ndarray, h: np.ndarray) -> np.ndarray:
    return np.bitwise_count(pool ^ h).sum(axis=1)  # [N] Hamming distances


def near_duplicates(hashes: np.ndarray, max_distance: int, against: np.ndarray | None = None) -> np.ndarray:
    """Boolean mask of hashes ([N, words] uint64) to drop: within ``max_distance`` bits of an earlier
    kept hash (or, with ``against``, of any hash in ``against``)."""
    hashes = np.asarray(hashes, dtype=np.uint64)
    drop = np.zeros(len(hashes), dtype=bool)
    if against is not None:
        against = np.asarray(against, dtype=np.uint64)
        if len(against):
            for i, h in enumerate(hashes):
                drop[i] = bool((_distances(against, h) <= max_distance).any())
        return drop
    kept = np.zeros_like(hashes)
    n_kept = 0
    for i, h in enumerate(hashes):
        if n_kept and (_distances(kept[:n_kept], h) <= max_distance).any():
            drop[i] = True
            continue
        kept[n_kept] = h
        n_kept += 1
    return drop


# ---------------------------------------------------------------------- prepare
@dataclass
class PrepareReport:
    found: int
    kept: int
    refused_heldout: list[str]
    no_face: list[str]
    unreadable: list[str]
    duplicates: list[str]
    heldout_duplicates: list[str]
    seconds: float


def detect_and_align(image_bgr: np.ndarray, detector, size: int, margin: float, pad: float = 0.25, border: int = 1
                     ) -> np.ndarray | None:
    """Largest YuNet face -> aligned RGB crop [size, size, 3], or None. The image is padded first
    (replicated border) so tightly cropped faces, which fill the frame, are still found."""
    import cv2

    from streamdeid.align import align_face

    h, w = image_bgr.shape[:2]
    p = int(round(pad * max(h, w)))
    padded = cv2.copyMakeBorder(image_bgr, p, p, p, p, border) if p else image_bgr
    dets = detector.detect(padded)
    if len(dets) == 0:
        return None
    boxes = dets.boxes
    i = int(np.argmax((boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1]) * dets.scores))
    aligned = align_face(padded, dets.landmarks[i], size=size, margin=margin)
    return cv2.cvtColor(aligned.crop, cv2.COLOR_BGR2RGB)


def list_images(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES)


def align_files(files: list[Path], detector, resolution: int, margin: float, log, t0: float):
    """(crops, names, no_face, unreadable, held-out hashes): held-out files are hashed, never kept."""
    import cv2

    crops, names, no_face, unreadable, held_hashes = [], [], [], [], []
    for n, f in enumerate(files):
        img = cv2.imread(str(f), cv2.IMREAD_COLOR)
        if img is None:
            unreadable.append(f.name)
            continue
        crop = detect_and_align(img, detector, resolution, margin)
        if crop is None:
            if not is_heldout(f):
                no_face.append(f.name)
            continue
        if is_heldout(f):  # hashed only, to drop re-saved copies of held-out faces
            held_hashes.append(dhash(crop, margin))
            continue
        crops.append(crop)
        names.append(f.name)
        if (n + 1) % 1000 == 0:
            log(f"prepare: {n + 1}/{len(files)} files, {len(crops)} faces, {time.time() - t0:.0f} s")
    return crops, names, no_face, unreadable, held_hashes


def duplicate_masks(crops: list[np.ndarray], held_hashes: list[np.ndarray], margin: float, max_distance: int
                    ) -> tuple[np.ndarray, np.ndarray]:
    """(near-duplicates of an earlier crop, near-duplicates of a held-out face only) as boolean masks."""
    hashes = np.array([dhash(c, margin) for c in crops], dtype=np.uint64).reshape(len(crops), HASH_WORDS)
    dup = near_duplicates(hashes, max_distance)
    held = np.array(held_hashes, dtype=np.uint64).reshape(len(held_hashes), HASH_WORDS)  # none: [0, 4]
    return dup, near_duplicates(hashes, max_distance, against=held) & ~dup


def prepare(data_dir: str | Path, out_dir: str | Path, resolution: int, *, max_distance: int = 20,
            limit: int = 0, overwrite: bool = False, log=print) -> PrepareReport:
    """Folder of face photos -> prepared dataset in ``out_dir`` (see module docstring)."""
    from streamdeid.config import AlignConfig, DetectConfig
    from streamdeid.detect import create_detector

    data_dir, out_dir = Path(data_dir), Path(out_dir)
    if not data_dir.is_dir():
        raise FileNotFoundError(f"--data {data_dir} is not a folder")
    if (out_dir / PREPARED_FILE).exists() and not overwrite:
        raise FileExistsError(f"{out_dir} holds a prepared dataset already (a run may be training on it); "
                              "pass --overwrite to replace it, or --out elsewhere")
    there = [n for n in (CROPS_FILE, TRAIN_LIST) if (out_dir / n).exists()]
    if there and not overwrite:  # files of that name with no prepared dataset beside them: somebody else's
        raise FileExistsError(f"{out_dir} holds {' and '.join(there)}, which prepare writes; pass --overwrite to "
                              "replace them, or --out elsewhere")
    t0 = time.time()
    files = list_images(data_dir)
    if limit:
        files = files[:limit]
    if not files:
        raise ValueError(f"no images ({', '.join(sorted(IMAGE_SUFFIXES))}) in {data_dir}")
    margin = AlignConfig().margin
    detector = create_detector(DetectConfig(input_size=320, score_threshold=0.5))
    refused = [f.name for f in files if is_heldout(f)]
    if refused:
        log(f"prepare: refusing {len(refused)} file(s) of the held-out evaluation split")
    crops, names, no_face, unreadable, held_hashes = align_files(files, detector, resolution, margin, log, t0)
    dup, held_dup = duplicate_masks(crops, held_hashes, margin, max_distance)
    keep = ~(dup | held_dup)
    kept_names = [nm for nm, k in zip(names, keep) if k]
    refuse_heldout(kept_names)  # belt and braces: never write a held-out name into train.txt
    if not kept_names:
        raise ValueError(f"no face to train on in {data_dir}: {len(files)} files, {len(no_face)} without a face, "
                         f"{len(unreadable)} unreadable, {len(refused)} of the held-out split, "
                         f"{int((dup | held_dup).sum())} near-duplicates")
    out_dir.mkdir(parents=True, exist_ok=True)
    arr = np.stack([c for c, k in zip(crops, keep) if k]) if kept_names else np.zeros((0, resolution, resolution, 3), np.uint8)
    np.save(out_dir / CROPS_FILE, arr)
    (out_dir / TRAIN_LIST).write_text("".join(n + "\n" for n in kept_names), encoding="utf-8")
    report = PrepareReport(
        found=len(files), kept=len(kept_names), refused_heldout=refused, no_face=no_face, unreadable=unreadable,
        duplicates=[nm for nm, d in zip(names, dup) if d],
        heldout_duplicates=[nm for nm, d in zip(names, held_dup) if d], seconds=time.time() - t0)
    meta = {"source": str(data_dir.resolve()), "resolution": resolution, "margin": margin,
            "dhash_max_distance": max_distance, "detector": "yunet (streamdeid.detect), largest face",
            **report.__dict__}
    (out_dir / PREPARED_FILE).write_text(json.dumps(meta, indent=1), encoding="utf-8")
    log(f"prepare: {report.found} files -> {report.kept} training crops at {resolution} px "
        f"({len(refused)} held-out refused, {len(no_face)} without a face, {len(unreadable)} unreadable, "
        f"{len(report.duplicates)} "
        f"near-duplicates, {len(report.heldout_duplicates)} near-duplicates of held-out faces) "
        f"in {report.seconds:.0f} s -> {out_dir}")
    return report


def write_prepared(out_dir: str | Path, crops_rgb: np.ndarray, names: list[str], source: str = "synthetic") -> Path:
    """Write a prepared dataset directly (tests, or crops aligned elsewhere). Held-out names are refused."""
    refuse_heldout(list(names))
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    crops_rgb = np.asarray(crops_rgb, dtype=np.uint8)
    np.save(out_dir / CROPS_FILE, crops_rgb)
    (out_dir / TRAIN_LIST).write_text("".join(n + "\n" for n in names), encoding="utf-8")
    (out_dir / PREPARED_FILE).write_text(json.dumps({"source": source, "resolution": int(crops_rgb.shape[1]),
                                                     "kept": len(names)}), encoding="utf-8")
    return out_dir


def find_prepared(data: str | Path, run_root: str | Path) -> Path:
    """``--data`` may be a prepared dir, or the raw folder that ``RUN/data`` was prepared from."""
    data = Path(data)
    if (data / PREPARED_FILE).is_file():
        return data
    cand = Path(run_root) / "data"
    if (cand / PREPARED_FILE).is_file():
        src = json.loads((cand / PREPARED_FILE).read_text())["source"]
        if Path(src) == data.resolve():
            return cand
    raise FileNotFoundError(f"{data} is not a prepared dataset; run `python -m training prepare --data {data} "
                            f"--run {run_root}` first (it writes {cand})")


class FaceSet:
    """All training crops in memory as uint8 [N, 3, R, R] RGB; batches are float [-1, 1].

    Batch order is a pure function of (seed, step): epoch e uses the permutation
    ``default_rng([seed, e])``, so a resumed run draws exactly the same batches.
    """

    def __init__(self, prepared_dir: str | Path, resolution: int, *, rank: int = 0, world: int = 1):
        import torch

        prepared_dir = Path(prepared_dir)
        names = [n for n in (prepared_dir / TRAIN_LIST).read_text(encoding="utf-8").splitlines() if n]
        refuse_heldout(names)
        arr = np.load(prepared_dir / CROPS_FILE, mmap_mode="r")
        if len(arr) != len(names):
            raise ValueError(f"{prepared_dir}: {len(names)} names but {len(arr)} crops")
        if len(names) == 0:
            raise ValueError(f"{prepared_dir}: no training crops")
        if arr.shape[1] != resolution:
            import cv2

            interp = cv2.INTER_AREA if arr.shape[1] > resolution else cv2.INTER_CUBIC
            arr = np.stack([cv2.resize(np.asarray(a), (resolution, resolution), interpolation=interp) for a in arr])
        self.names = names
        self.images = torch.from_numpy(np.ascontiguousarray(np.asarray(arr).transpose(0, 3, 1, 2)))  # [N, 3, R, R]
        self.rank, self.world = rank, world
        self._perm: tuple = (None, None)  # ((seed, epoch), that epoch's permutation on the crops' device)

    def __len__(self) -> int:
        return len(self.names)

    def to(self, device) -> "FaceSet":
        """Keep the crops on ``device`` (uint8: 111 MB for 9,062 crops at 64 px), so that a batch is
        gathered there and no image crosses from the host in the training loop."""
        self.images = self.images.to(device)
        self._perm = (None, None)
        return self

    def _position(self, step: int, batch: int) -> tuple[int, int]:
        """(epoch, offset of this process's batch in that epoch's order) at ``step`` (global batch = batch * world)."""
        per_epoch = max(len(self) // (batch * self.world), 1)
        epoch, pos = divmod(step, per_epoch)
        return epoch, pos * batch * self.world + self.rank * batch

    def _epoch_perm(self, seed: int, epoch: int, need: int) -> np.ndarray:
        """Epoch ``epoch``'s order of the crops, repeated where fewer crops than ``need`` exist."""
        perm = np.random.default_rng([seed, epoch]).permutation(len(self))
        return np.resize(perm, need) if len(perm) < need else perm

    def step_batch(self, seed: int, step: int, batch: int, flip: bool) -> torch.Tensor:
        """The batch of ``step`` as float [B, 3, R, R] in [-1, 1], gathered on the crops' device.

        The epoch's permutation is copied to the device once per epoch (a copy from the host waits
        for the GPU's queue; once a step would hold every step to the GPU's pace). Flips draw from
        torch's default generator, which the loop seeds from (seed, step, rank): resume stays exact.
        """
        import torch

        epoch, start = self._position(step, batch)
        if self._perm[0] != (seed, epoch):
            perm = self._epoch_perm(seed, epoch, batch * self.world)
            self._perm = ((seed, epoch), torch.as_tensor(perm, dtype=torch.long).to(self.images.device))
        idx = self._perm[1][start:start + batch]
        x = self.images[idx].float().div_(127.5).sub_(1.0)  # [B, 3, R, R]
        if flip:
            mirror = torch.rand(x.shape[0], device=x.device) < 0.5
            x = torch.where(mirror[:, None, None, None], x.flip(-1), x)
        return x

    def batch(self, idx: np.ndarray) -> torch.Tensor:
        """Fixed crops (sample grids, tests) as float [B, 3, R, R] in [-1, 1]."""
        import torch

        return self.images[torch.as_tensor(idx, dtype=torch.long).to(self.images.device)].float().div_(127.5).sub_(1.0)

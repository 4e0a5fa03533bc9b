"""Privacy, recovery, diversity and utility of an anonymizer on a set of face images.

Every face YuNet finds in an image is anonymized the way the pipeline does it
(:class:`~streamdeid.render.FrameRenderer`: align to a 128 px crop, anonymize,
paste back through the soft mask), so the numbers describe what a user gets.

* Anonymization (image level): each anonymized face is embedded at its
  original's geometry and compared with the original (SFace cosine >= 0.363;
  dlib distance <= 0.6). ``matched`` is the share still recognised (lower is
  better). For SFace, ``matched_beyond_context`` also requires the similarity to
  beat the original-with-its-face-blanked by ``leakcheck.EXCESS_MARGIN`` (see
  :mod:`streamdeid.identity.leakcheck`): it discounts matches made by hair,
  clothes and background, which every method keeps.
* Recovery and diversity (crop level, 128 px aligned crops): ``recover(anon,
  key)`` against the original crop with the right and with a wrong key
  (identity match and MSE/PSNR/SSIM, see :mod:`evaluation.pixels`); two
  keys on one face must give two identities (share matched, lower is better).
  Not applicable to methods without a recoverer / whose output ignores the key.
* Utility: the share of anonymized faces YuNet (and dlib's HOG detector) still
  finds (IoU >= 0.5 with the original's box), the IoU of those boxes and the
  5-point landmark error normalised by the original's eye distance (NME).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import cv2
import numpy as np

from streamdeid.align import align_box, align_face, canonical_template, landmarks_usable
from streamdeid.config import AlignConfig, AnonymizeConfig, BlendConfig, DetectConfig
from streamdeid.detect import create_detector
from streamdeid.identity.leakcheck import EXCESS_MARGIN, blank_face
from streamdeid.render import FrameRenderer
from streamdeid.types import AlignedFace, Frame, FrameResult, TrackedFace
from streamdeid.video.images import is_image
from .pixels import fidelity
from .recognizers import DlibRecognizer, FaceGeometry, SFaceRecognizer, box_iou
from .recovery import EvalKeys, RecoverFn, keyless, vault_round_trip

DETECT_IOU = 0.5  # a detection in the anonymized image "is" the face at this IoU
DLIB_REFERENCE_IOU = 0.3  # dlib's and YuNet's boxes frame a face differently


@dataclass
class FaceSample:
    image: int  # index into FaceSet.images
    geometry: FaceGeometry
    score: float


@dataclass
class FaceSet:
    name: str
    paths: list[Path]
    images: list[np.ndarray]
    faces: list[FaceSample]
    no_face: list[str] = field(default_factory=list)  # images in which YuNet found no face


def image_files(folder: str | Path) -> list[Path]:
    return sorted(p for p in Path(folder).iterdir() if p.is_file() and is_image(p))


def load_face_set(name: str, paths: Sequence[str | Path], *, detector=None, limit: int | None = None,
                  largest_only: bool = False, pad: float = 0.0, progress: Callable | None = None) -> FaceSet:
    """Read images and find their faces (YuNet, the pipeline's settings).

    ``limit`` caps the number of faces; ``largest_only`` keeps one face per image
    (for face-crop datasets whose images hold one person). ``pad`` adds a black
    border of that fraction of the image size on every side: tight face crops
    (UTKFace) have faces cut by the border, where YuNet's box jumps on a slightly
    changed image (box IoU < 0.9 on 5 of 60 blurred copies unpadded, 0 with 0.3),
    which would make the utility metrics measure the crop, not the anonymizer."""
    detector = detector or create_detector(DetectConfig())
    fs = FaceSet(name, [], [], [])
    it = progress(paths) if progress else paths
    for p in it:
        if limit is not None and len(fs.faces) >= limit:
            break
        img = cv2.imread(str(p), cv2.IMREAD_COLOR)
        if img is None:
            fs.no_face.append(str(p))
            continue
        if pad > 0:
            b = int(round(pad * max(img.shape[:2])))
            img = cv2.copyMakeBorder(img, b, b, b, b, cv2.BORDER_CONSTANT, value=(0, 0, 0))
        dets = detector.detect(img)
        if not len(dets):
            fs.no_face.append(str(p))
            continue
        order = np.argsort(-(dets.boxes[:, 2] - dets.boxes[:, 0]) * (dets.boxes[:, 3] - dets.boxes[:, 1]))
        if largest_only:
            order = order[:1]
        fs.paths.append(Path(p))
        fs.images.append(img)
        for j in order:
            if limit is not None and len(fs.faces) >= limit:
                break
            fs.faces.append(FaceSample(len(fs.images) - 1, FaceGeometry(dets.boxes[j], dets.landmarks[j]),
                                       float(dets.scores[j])))
    return fs


def _rate(flags) -> float | None:
    flags = np.asarray(flags, dtype=bool)
    return float(flags.mean()) if flags.size else None


def _mean(values) -> float | None:
    values = [v for v in values if v is not None and math.isfinite(v)]
    return float(np.mean(values)) if values else None


def _nme(a: np.ndarray, b: np.ndarray, eye_a: int | tuple, eye_b: int | tuple) -> float:
    """Mean point distance normalised by the eye distance of ``a``."""
    def centre(pts, idx):
        return pts[list(idx)].mean(0) if isinstance(idx, tuple) else pts[idx]
    d = np.linalg.norm(centre(a, eye_a) - centre(a, eye_b))
    return float(np.linalg.norm(a - b, axis=1).mean() / max(d, 1e-6))


class FaceEvaluator:
    """Caches everything about the originals once; ``evaluate`` then scores one anonymizer."""

    def __init__(self, face_set: FaceSet, recognizers: list, *, keys: EvalKeys | None = None,
                 align: AlignConfig | None = None, blend: BlendConfig | None = None, detector=None,
                 examples: int = 8, progress: Callable | None = None) -> None:
        self.fs = face_set
        self.recognizers = recognizers
        self.keys = keys or EvalKeys()
        self.align = align or AlignConfig()
        self.blend = blend or BlendConfig()
        self.detector = detector or create_detector(DetectConfig())
        self.n_examples = examples
        self.progress = progress or (lambda it, **_: it)
        self.dlib = next((r for r in recognizers if isinstance(r, DlibRecognizer)), None)
        self.sface = next((r for r in recognizers if isinstance(r, SFaceRecognizer)), None)
        self._prepare()

    # ------------------------------------------------------------------ originals
    def _prepare(self) -> None:
        fs = self.fs
        imgs = [fs.images[f.image] for f in fs.faces]
        self.dlib_dets = [self.dlib.detect(im) for im in fs.images] if self.dlib else None
        self.handles, self.orig_emb = {}, {}
        for rec in self.recognizers:
            if isinstance(rec, DlibRecognizer):
                h = [rec.prepare(fs.images[f.image], f.geometry, self.dlib_dets[f.image])
                     for f in self.progress(fs.faces, desc=f"{fs.name}: dlib shapes", leave=False)]
            else:
                h = [rec.prepare(fs.images[f.image], f.geometry) for f in fs.faces]
            self.handles[rec.name] = h
            self.orig_emb[rec.name] = self._embed(rec, imgs, h, f"{fs.name}: {rec.name} originals")
        if self.sface:
            blanked = np.stack([blank_face(c) for c in self.sface.crops(imgs, self.handles["sface"])]) if imgs else None
            self.blank_ref = (self.sface.score(self.orig_emb["sface"], self.sface.embed_crops(blanked))
                              if imgs else np.zeros(0))
        # The pipeline's aligned crops (recovery, diversity and the figure work on these).
        self.aligned: list[AlignedFace] = [self._align(fs.images[f.image], f.geometry) for f in fs.faces]
        self.crops = (np.stack([a.crop for a in self.aligned]) if self.aligned
                      else np.zeros((0, self.align.crop_size, self.align.crop_size, 3), np.uint8))
        s, m = self.align.crop_size, self.align.margin
        tl = canonical_template(s, m)
        bc = ((np.array([0.5, 0.6]) - 0.5) * (1 - m) + 0.5) * s  # where align_box puts a box centre
        half = 0.95 * (1 - m) * s / 2
        self.crop_geometry = FaceGeometry([bc[0] - half, bc[1] - half, bc[0] + half, bc[1] + half], tl)
        self.crop_handles, self.crop_emb = {}, {}  # filled on first use (keyed methods only)
        # Utility references: YuNet geometry is the original's; dlib's own box and shape.
        self.dlib_ref = []
        if self.dlib:
            for f in fs.faces:
                dets = self.dlib_dets[f.image]
                ref = None
                if len(dets):
                    ious = box_iou(dets, f.geometry.box[None])[:, 0]
                    if ious.max() >= DLIB_REFERENCE_IOU:
                        box = dets[int(ious.argmax())]
                        ref = (box, self.dlib.points(self.dlib.shape(fs.images[f.image], box)))
                self.dlib_ref.append(ref)

    def _embed(self, rec, images, handles, desc: str, chunk: int = 32) -> np.ndarray:
        outs = []
        for i in self.progress(range(0, len(images), chunk), desc=desc, leave=False):
            outs.append(rec.embed(images[i:i + chunk], handles[i:i + chunk]))
        return np.concatenate(outs) if outs else np.zeros((0, 128), np.float32)

    def _align(self, image: np.ndarray, g: FaceGeometry) -> AlignedFace:
        s, m = self.align.crop_size, self.align.margin
        if landmarks_usable(g.landmarks, g.box):
            return align_face(image, g.landmarks, s, m)
        return align_box(image, g.box, s, m)

    def _crop_embed(self, rec, crops: np.ndarray, desc: str) -> np.ndarray:
        if rec.name not in self.crop_handles:  # geometry found on the original crops
            self.crop_handles[rec.name] = [rec.prepare(c, self.crop_geometry) for c in self.crops]
        return self._embed(rec, list(crops), self.crop_handles[rec.name], desc)

    def _crop_original_emb(self, rec) -> np.ndarray:
        if rec.name not in self.crop_emb:
            self.crop_emb[rec.name] = self._crop_embed(rec, self.crops, f"{self.fs.name}: {rec.name} crops")
        return self.crop_emb[rec.name]

    # ------------------------------------------------------------------ one method
    def anonymize_images(self, anonymizer, cfg: AnonymizeConfig) -> list[np.ndarray]:
        """Every image with all its evaluated faces anonymized by the pipeline's renderer."""
        ctx = self.keys.contexts(len(self.fs.faces))
        renderer = FrameRenderer(anonymizer, align=self.align, blend=self.blend, anonymize=cfg,
                                 key_for_track=lambda tid: ctx[tid - 1].key)
        out = []
        by_image: dict[int, list[int]] = {}
        for i, f in enumerate(self.fs.faces):
            by_image.setdefault(f.image, []).append(i)
        for k, img in enumerate(self.progress(self.fs.images, desc=f"{self.fs.name}: {cfg.method} render", leave=False)):
            image = img.copy()
            faces = [TrackedFace(i + 1, self.fs.faces[i].geometry.box, self.fs.faces[i].geometry.landmarks,
                                 self.fs.faces[i].score) for i in by_image.get(k, [])]
            renderer.render(FrameResult(Frame(0, image, None, None), faces))
            out.append(image)
        self.fallbacks = renderer.fallbacks
        return out

    def evaluate(self, anonymizer, cfg: AnonymizeConfig, recover: RecoverFn | None = None) -> dict:
        fs = self.fs
        anon_images = self.anonymize_images(anonymizer, cfg)
        imgs = [anon_images[f.image] for f in fs.faces]
        result: dict = {"method": cfg.method, "faces": len(fs.faces), "images": len(fs.images),
                        "renderer_fallbacks": self.fallbacks}

        # Anonymization (image level, original geometry)
        anon = {}
        for rec in self.recognizers:
            emb = self._embed(rec, imgs, self.handles[rec.name], f"{fs.name}: {cfg.method} {rec.name}")
            scores = rec.score(self.orig_emb[rec.name], emb)
            m = rec.matches(scores)
            entry = {"matched": _rate(m), "n": int(len(m)), "mean_score": _mean(scores.tolist()), "rule": rec.rule}
            if rec is self.sface:
                entry["matched_beyond_context"] = _rate(m & (scores - self.blank_ref >= EXCESS_MARGIN))
                entry["beyond_context_margin"] = EXCESS_MARGIN
            anon[rec.name] = entry
        result["anonymization"] = anon
        result["utility"] = self._utility(anon_images)

        # Crop level: anonymize the pipeline's aligned crops directly.
        right = self.keys.contexts(len(fs.faces), "right")
        wrong = self.keys.contexts(len(fs.faces), "wrong")
        anon_crops = anonymizer(self.crops, right) if len(self.crops) else self.crops.copy()
        if recover is None:
            result["recovery"] = {"applicable": False, "reason": f"{cfg.method} has no recoverer (irreversible)"}
            rec_crops = wrong_crops = None
        else:
            rec_crops = recover(anon_crops, right)
            wrong_crops = recover(anon_crops, wrong)
            result["recovery"] = {"applicable": True,
                                  "right_key": self._crop_identity(rec_crops, "recovered"),
                                  "wrong_key": self._crop_identity(wrong_crops, "wrong key")}
        if keyless(anonymizer, self.crops, self.keys):
            result["diversity"] = {"applicable": False, "reason": "output does not depend on the key"}
        else:
            anon2 = anonymizer(self.crops, wrong)
            div = {"applicable": True}
            for rec in self.recognizers:
                e1 = self._crop_embed(rec, anon_crops, f"{fs.name}: {cfg.method} {rec.name} key 1")
                e2 = self._crop_embed(rec, anon2, f"{fs.name}: {cfg.method} {rec.name} key 2")
                div[rec.name] = {"matched": _rate(rec.matches(rec.score(e1, e2))), "rule": rec.rule}
            result["diversity"] = div

        k = min(self.n_examples, len(fs.faces))
        result["_examples"] = {
            "original": self.crops[:k],
            "anonymized": np.stack([cv2.warpAffine(anon_images[fs.faces[i].image], self.aligned[i].matrix,
                                                   (self.align.crop_size,) * 2, flags=cv2.INTER_LINEAR,
                                                   borderMode=cv2.BORDER_REPLICATE) for i in range(k)])
            if k else self.crops[:0],
            "recovered": None if rec_crops is None else rec_crops[:k],
            "wrong_key": None if wrong_crops is None else wrong_crops[:k],
        }
        return result

    def _crop_identity(self, crops: np.ndarray, what: str) -> dict:
        out = {"pixels": fidelity(self.crops, crops)}
        for rec in self.recognizers:
            if out["pixels"].get("lossless"):
                out[rec.name] = {"matched": 1.0, "rule": rec.rule, "note": "bit-exact"}
                continue
            e = self._crop_embed(rec, crops, f"{self.fs.name}: {rec.name} {what}")
            out[rec.name] = {"matched": _rate(rec.matches(rec.score(self._crop_original_emb(rec), e))), "rule": rec.rule}
        return out

    def _utility(self, anon_images: list[np.ndarray]) -> dict:
        fs = self.fs
        yu_det, yu_iou, yu_nme = [], [], []
        dets_cache = [self.detector.detect(im) for im in anon_images]
        for f in fs.faces:
            d = dets_cache[f.image]
            if not len(d):
                yu_det.append(False)
                continue
            ious = box_iou(d.boxes, f.geometry.box[None])[:, 0]
            j = int(ious.argmax())
            ok = ious[j] >= DETECT_IOU
            yu_det.append(bool(ok))
            if ok:
                yu_iou.append(float(ious[j]))
                yu_nme.append(_nme(f.geometry.landmarks, d.landmarks[j].astype(np.float64), 0, 1))
        out = {"yunet": {"detected": _rate(yu_det), "box_iou": _mean(yu_iou), "landmark_nme": _mean(yu_nme),
                         "n": len(yu_det), "iou_threshold": DETECT_IOU}}
        if self.dlib:
            dl_dets = [self.dlib.detect(im) for im in anon_images]
            det, ious_ok, nmes = [], [], []
            for f, ref in zip(fs.faces, self.dlib_ref):
                if ref is None:
                    continue
                box, pts = ref
                d = dl_dets[f.image]
                if not len(d):
                    det.append(False)
                    continue
                ious = box_iou(d, box[None])[:, 0]
                j = int(ious.argmax())
                ok = ious[j] >= DETECT_IOU
                det.append(bool(ok))
                if ok:
                    ious_ok.append(float(ious[j]))
                    pa = self.dlib.points(self.dlib.shape(anon_images[f.image], d[j]))
                    nmes.append(_nme(pts, pa, (0, 1), (2, 3)))
            out["dlib"] = {"detected": _rate(det), "box_iou": _mean(ious_ok), "landmark_nme": _mean(nmes),
                           "n": len(det), "reference_found": _rate([r is not None for r in self.dlib_ref]),
                           "iou_threshold": DETECT_IOU}
        return out

    # ------------------------------------------------------------------ vault
    def vault(self) -> dict:
        """Vault-mode recovery (method independent): bit-exact with the right key, nothing with a wrong one."""
        if not len(self.crops):
            return {"applicable": False, "reason": "no faces"}
        right = vault_round_trip(self.crops, self.keys, "right")
        wrong = vault_round_trip(self.crops, self.keys, "wrong")
        return {"applicable": True,
                "right_key": self._crop_identity(right, "vault") if right is not None else {"recovered": 0.0},
                "wrong_key": {"recovered": 0.0 if wrong is None else 1.0,
                              "note": "the vault refuses a wrong key: no pixels are returned"}}

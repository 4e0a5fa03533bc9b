"""What a run writes into its recovery vault (``VaultRecorder``; one vault per live segment). How an output
names its vault and the video id tag are vault/naming.py, the vault format streamdeid/vault/, recovery
(putting faces back) streamdeid/restore/.

At run time ``VaultRecorder`` stores, per anonymized face, the frame rectangle the paste touched, the
original pixels there, and which of them this face *owns* (a mask beside the crop, stored exactly;
pixels outside the face's own mask never reach the vault's crop codec, which fills them with the
mean of the owned ones, so a track key never reveals a neighbour's face).
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

from ..anonymizers import Anonymizer, reversible_method
from ..config import OutputConfig, PipelineConfig
from ..files import sha256_file
from ..keys import RunKeys
from ..render import PastedFace
from ..types import Frame, FrameResult, StreamdeidError
from ..vault import MaskParams, VaultWriter, source_fingerprint, vault_path_for, video_id_tag
from ..video.encoding import is_lossless
from ..video.planes import cut as cut_planes

class VaultRecorder:
    """Observer for ``process_frames``: appends one vault record per pasted face.

    ``mask_params`` of a record: its paste position (roi) and ``generated``,
    true when the face was made by the reversible anonymizer ``reversible``
    (dbaf: model-mode recovery applies), false otherwise (solid fallback, blur).
    """

    def __init__(self, writer: VaultWriter, reversible: str | None = None) -> None:
        self.writer = writer
        self.reversible = reversible

    def __call__(self, result: FrameResult, pasted: list[PastedFace]) -> None:
        self.record(result.frame, pasted)

    def record(self, frame: Frame, pasted: list[PastedFace]) -> None:
        self.writer.advance(frame.index)  # closes the open chunk group on time, faces or not
        self.writer.note_output(frame.index, frame.image)  # (rendered: the frame as the output shows it)
        crops = self.writer.store_crops
        yuv = frame.yuv if crops and self.writer.takes_planes else None
        for p in pasted:
            generated = self.reversible is not None and p.method == self.reversible
            x, y, w, h = p.roi
            self.writer.append(
                p.face.track_id, frame.index, frame.pts, p.aligned.inverse, len(p.aligned.crop),
                p.original if crops else None,
                mask_params=MaskParams(float(x), float(y), generated), owned=p.owned,
                planes=cut_planes(yuv, x, y, w, h) if yuv is not None else None,
            )


class SegmentVaultWriter:
    """One vault per live recording segment (``live.outputs.SegmentVault``).

    Each segment is a video of its own: a fresh video id (tagged into the
    segment file), frame indices from the segment's first frame, and its
    vault beside it, so ``streamdeid recover SEGMENT`` works on any segment.
    """

    def __init__(self, keys: RunKeys, segment: Path, *, overwrite: bool,
                 reversible: str | None = None, pipeline: dict | None = None, quality: str = "high",
                 fps: float | None = None) -> None:
        self.keys = keys.for_next_video()
        self.path = vault_path_for(segment)
        if self.path.exists() and not overwrite:
            raise StreamdeidError(f"{self.path} exists; pass --overwrite to replace it")
        writer = open_vault_writer(self.path, self.keys, source="-", output=segment, store_crops=True,
                                   overwrite=overwrite, pipeline=pipeline, quality=quality, fps=fps)
        self._recorder = VaultRecorder(writer, reversible)
        self.metadata = video_id_tag(self.keys.video_id)

    def record(self, index: int, frame: Frame, pasted: list[PastedFace]) -> None:
        self._recorder.record(frame, pasted)

    def close(self, segment: Path, success: bool) -> None:
        """Finish the vault; keep it beside the segment's final (or partial) file."""
        writer = self._recorder.writer
        if success:
            writer.close()
        else:
            writer.abort()
        target = vault_path_for(segment)
        if target != self.path:
            self.path.rename(target)
            self.path = target


def segment_vault_factory(keys: RunKeys, config: PipelineConfig, anonymizer: Anonymizer):
    """A live run's ``vault_factory``: one ``SegmentVaultWriter`` per recorded segment."""
    reversible = reversible_method(anonymizer)
    pipeline = pipeline_meta(config, anonymizer)

    def factory(segment: Path, fps: float | None = None) -> SegmentVaultWriter:
        return SegmentVaultWriter(keys, segment, reversible=reversible, pipeline=pipeline,
                                  overwrite=config.output.overwrite, quality=vault_quality(config.output), fps=fps)

    return factory


def open_vault_writer(path: Path, keys: RunKeys, *, source: str, output: Path, store_crops: bool,
                      overwrite: bool, pipeline: dict | None = None, quality: str = "high",
                      fps: float | None = None) -> VaultWriter:
    """``pipeline``: clear-text settings model-mode recovery needs to redo the paste
    (anonymizer, model hash, crop size, align margin, blend mask); nothing secret.
    ``quality``: the crop codec (vault.crops.QUALITIES); chunks hold about a second of ``fps``."""
    keys.vault_outputs.append(Path(output))  # before the file exists: a failed run keeps the key it needs
    meta = {"video_id": keys.video_id.hex(), "output": output.name}
    if source != "-" and Path(source).is_file():
        meta["source_fingerprint"] = source_fingerprint(source, keys.master, keys.video_id)
    if pipeline:
        meta["pipeline"] = pipeline
    chunk_frames = 25
    if fps and fps > 0:
        meta["fps"] = round(float(fps), 6)
        chunk_frames = max(1, min(240, round(fps)))
    return VaultWriter(path, meta, keys.master, store_crops=store_crops, overwrite=overwrite, quality=quality,
                       chunk_frames=chunk_frames)


def vault_quality(output: OutputConfig) -> str:
    """The vault's crop codec: ``output.vault_quality``, where "auto" means lossless for a lossless
    output (recovery stays bit-exact) and "high" otherwise."""
    if output.vault_quality != "auto":
        return output.vault_quality
    return "lossless" if is_lossless(output) else "high"


def pipeline_meta(config: PipelineConfig, anonymizer: Anonymizer) -> dict:
    """What ``recover --mode model`` needs from the run, for the vault header."""
    meta = {
        "anonymizer": anonymizer.name,
        "crop_size": config.align.crop_size,
        "align_margin": config.align.margin,
        "blend": asdict(config.blend.resolved(generated=bool(anonymizer.color_match))),
    }
    model_path = anonymizer.model_path
    if model_path is not None:
        meta["model"] = {"file": Path(model_path).name, "sha256": sha256_file(model_path),
                         "backend": anonymizer.backend_name or config.anonymize.backend}
    return meta


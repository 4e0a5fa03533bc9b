"""Face alignment: 5-point similarity warp to a canonical crop, box fallback."""

from streamdeid.align.aligner import (
    ARCFACE_112,
    align_box,
    align_face,
    canonical_template,
    landmarks_usable,
    similarity_transform,
)

__all__ = ["ARCFACE_112", "align_box", "align_face", "canonical_template", "landmarks_usable", "similarity_transform"]

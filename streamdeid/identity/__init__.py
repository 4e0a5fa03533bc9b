"""Face identity embeddings (SFace), used to measure how well faces are anonymized."""

from .sface import (
    ARCFACE_112_TEMPLATE,
    SFACE_MATCH_THRESHOLD,
    SFace,
    align_for_sface,
    cosine,
    default_model_path,
    estimate_similarity,
)

__all__ = [
    "ARCFACE_112_TEMPLATE",
    "SFACE_MATCH_THRESHOLD",
    "SFace",
    "align_for_sface",
    "cosine",
    "default_model_path",
    "estimate_similarity",
]

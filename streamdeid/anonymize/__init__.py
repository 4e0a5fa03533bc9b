"""Anonymizers: batched crop -> crop transforms, created by name from AnonymizeConfig."""

from .base import Anonymizer, check_batch
from .classic import (
    REGISTRY,
    BlurAnonymizer,
    MosaicAnonymizer,
    SolidAnonymizer,
    create_anonymizer,
    register_anonymizer,
)

__all__ = [
    "REGISTRY",
    "Anonymizer",
    "BlurAnonymizer",
    "MosaicAnonymizer",
    "SolidAnonymizer",
    "check_batch",
    "create_anonymizer",
    "register_anonymizer",
]

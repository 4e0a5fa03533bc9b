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
from .dbaf import DBAFAnonymizer, create_dbaf, dbaf_recover_crops

register_anonymizer("dbaf", create_dbaf)

__all__ = [
    "REGISTRY",
    "Anonymizer",
    "BlurAnonymizer",
    "DBAFAnonymizer",
    "MosaicAnonymizer",
    "SolidAnonymizer",
    "check_batch",
    "create_anonymizer",
    "dbaf_recover_crops",
    "register_anonymizer",
]

"""Anonymizers: batched crop -> crop transforms, created by name from AnonymizeConfig."""

from ..registry import METHODS, load
from .base import Anonymizer, AnonymizerBase, check_batch, guard_every, reversible_method
from .classic import (
    REGISTRY,
    BlurAnonymizer,
    MosaicAnonymizer,
    SolidAnonymizer,
    anonymizer_type,
    create_anonymizer,
    register_anonymizer,
)
from .dbaf import DBAFAnonymizer, dbaf_recover_crops

for _name, _factory in METHODS.items():
    register_anonymizer(_name, load(_factory))

__all__ = [
    "REGISTRY",
    "Anonymizer",
    "AnonymizerBase",
    "BlurAnonymizer",
    "DBAFAnonymizer",
    "MosaicAnonymizer",
    "SolidAnonymizer",
    "anonymizer_type",
    "check_batch",
    "create_anonymizer",
    "dbaf_recover_crops",
    "guard_every",
    "register_anonymizer",
    "reversible_method",
]

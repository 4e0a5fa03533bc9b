"""The names a run chooses from, in one place: anonymizer methods and DBAF generator backends.

The CLI reads them for its choices at start-up, so this module imports nothing heavy: each name maps
to the ``module:attribute`` of its factory, imported only when a run asks for it
(``streamdeid.anonymizers.create_anonymizer``, ``streamdeid.backends.create_backend``).
"""

from __future__ import annotations

import importlib

#: anonymizer method -> its factory, AnonymizeConfig -> Anonymizer (the CLI's --anonymizer choices)
METHODS = {
    "blur": "streamdeid.anonymizers.classic:BlurAnonymizer",
    "mosaic": "streamdeid.anonymizers.classic:MosaicAnonymizer",
    "solid": "streamdeid.anonymizers.classic:SolidAnonymizer",
    "dbaf": "streamdeid.anonymizers.dbaf:create_dbaf",
    "composite": "streamdeid.anonymizers.composite:CompositeAnonymizer",
}

#: DBAF generator backend -> its class (the CLI's --backend choices). The model file each expects:
#: .onnx, .safetensors, .engine/.plan.
BACKENDS = {
    "onnxrt": "streamdeid.backends.onnxrt:OnnxRuntimeBackend",
    "torch": "streamdeid.backends.torch:TorchBackend",
    "tensorrt": "streamdeid.backends.tensorrt:TensorRTBackend",
}


def load(spec: str):
    """``"package.module:name"`` -> that object (imports the module)."""
    module, _, name = spec.partition(":")
    return vars(importlib.import_module(module))[name]

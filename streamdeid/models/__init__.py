"""DBAF networks in torch (the ``train`` extra).

Who imports this: training/, engines/ and ``onnx_export`` (train and export),
and at run time only the optional torch backend (``--backend torch``,
``streamdeid/backends/torch.py``), which imports ``dbaf`` and ``io`` inside its
constructor. The default runtime (ONNX Runtime backend, or no DBAF at all)
never imports this package, so it runs without torch.

``config`` is torch-free; the network modules are imported lazily on first
attribute access, so ``from streamdeid.models.config import DBAFConfig`` works
without torch installed.
"""

from __future__ import annotations

import importlib

from .config import PRESETS, DBAFConfig, latent_split

_LAZY = {
    "DBAF": "dbaf",
    "CID": "dbaf",
    "MAAR": "dbaf",
    "KRIA": "dbaf",
    "count_parameters": "dbaf",
    "DBAFRuntime": "dbaf",
    "Encoder": "encoder",
    "Decoder": "stylegan2",
    "Discriminator": "stylegan2",
    "MappingNetwork": "stylegan2",
    "SFace": "sface",
    "save_checkpoint": "io",
    "load_checkpoint": "io",
    "read_checkpoint_header": "io",
    "CheckpointError": "io",
}

__all__ = ["DBAFConfig", "PRESETS", "latent_split", *_LAZY]


def __getattr__(name: str):
    if name in _LAZY:
        module = importlib.import_module(f".{_LAZY[name]}", __name__)
        return getattr(module, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

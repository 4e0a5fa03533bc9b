"""Training package of streamdeid's DBAF generator: ``python -m training STAGE ...`` (see training.cli).

Stages: prepare, stylegan2, e4e, reconstruct, disentangle, anonymize, export. The networks
live in ``streamdeid.models``; this package holds data preparation, losses, optimizers,
the training loop and export. Needs the ``train`` extra (torch, safetensors, onnx).
"""

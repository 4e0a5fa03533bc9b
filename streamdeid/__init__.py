"""streamdeid: anonymize faces in video, recover them with a key."""

__version__ = "0.1.0"
__all__ = ["anonymize", "PipelineConfig"]


def __getattr__(name: str):
    # Lazy: `import streamdeid` stays cheap (no OpenCV/PyAV/ONNX Runtime load).
    if name == "anonymize":
        from .api import anonymize

        return anonymize
    if name == "PipelineConfig":
        from .config import PipelineConfig

        return PipelineConfig
    raise AttributeError(name)

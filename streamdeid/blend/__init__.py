"""Soft face masks and pasting anonymized crops back into frames."""

from .mask import canonical_landmarks, face_mask
from .paste import WarpedFace, blend_into, mask_support, paste_back, paste_roi, warp_to_frame

__all__ = ["WarpedFace", "blend_into", "canonical_landmarks", "face_mask", "mask_support", "paste_back",
           "paste_roi", "warp_to_frame"]

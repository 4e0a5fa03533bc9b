"""Multi-face tracking (ByteTrack-style, privacy-first output rules)."""

from streamdeid.track.kalman_filter import KalmanFilter
from streamdeid.track.matching import hungarian, iou_matrix, linear_assignment
from streamdeid.track.tracker import FaceTracker

__all__ = ["FaceTracker", "KalmanFilter", "hungarian", "iou_matrix", "linear_assignment"]

"""The closer looks of a video run (detect/closer.py): at a held face, and at a weak box that starts a track."""

from __future__ import annotations

import cv2
import numpy as np

from streamdeid.config import DetectConfig
from streamdeid.detect.closer import GuessCheck
from streamdeid.detect.finder import FaceFinder
from streamdeid.types import Detections


def _check() -> GuessCheck:
    return GuessCheck(FaceFinder(DetectConfig()))


def test_a_guess_on_a_face_is_found_and_one_on_the_wall_is_not(media) -> None:
    image = cv2.imread(str(media / "two_people.jpg"))
    faces = FaceFinder(DetectConfig()).find(image, scan=True)
    assert len(faces) >= 2
    check = _check()
    box = faces.boxes[0].astype(np.float64)
    looked, found = check(image, box + 3)  # a guess a few px off the face
    assert looked and found is not None
    assert abs(found.boxes[0] - box).max() < 0.25 * (box[3] - box[1])
    # the same box moved onto a plain part of the picture (the top-left corner region)
    h = box[3] - box[1]
    empty = np.array([5.0, 5.0, 5.0 + 0.8 * h, 5.0 + h])
    looked, found = check(image, empty)
    assert looked and found is None


def test_small_and_edge_guesses_are_not_looked_at(media) -> None:
    image = cv2.imread(str(media / "two_people.jpg"))
    check = _check()
    h, w = image.shape[:2]
    assert FaceFinder(DetectConfig()).fast_floor(w, h) > 30  # 42 px on this 1126x661 photo
    assert check(image, np.array([100.0, 100.0, 130.0, 130.0])) == (False, None)  # 30 px: under the floor
    assert check(image, np.array([w - 30.0, 100.0, w + 30.0, 180.0])) == (False, None)  # cut by the edge
    assert check.closer.looks == 0


def test_a_weak_box_starts_a_provisional_track_unless_a_closer_look_finds_a_face(media) -> None:
    """TrackConfig.look_at_weak: of the boxes that start tracks, a weak one the closer look finds no face
    in is provisional (reported from its second detector run); a weak one on a face and a strong one are not."""
    from dataclasses import replace

    from streamdeid.config import PipelineConfig, TrackConfig
    from streamdeid.stages import FaceStage

    image = cv2.imread(str(media / "two_people.jpg"))
    faces = FaceFinder(DetectConfig()).find(image, scan=True)
    face_box = faces.boxes[0].astype(np.float64)
    h = face_box[3] - face_box[1]
    wall = np.array([5.0, 5.0, 5.0 + 0.8 * h, 5.0 + h])
    boxes = np.stack([face_box, wall, face_box + [0, 0, 1, 1]])
    dets = Detections(boxes, np.array([0.35, 0.35, 0.9]), np.repeat(faces.landmarks[:1], 3, axis=0))
    stage = FaceStage(replace(PipelineConfig(), track=TrackConfig(look_at_weak=True)), 25.0)
    decide = stage._looked_at(np.zeros(3, bool), dets, image)
    assert decide(np.arange(3)).tolist() == [False, True, False]
    assert decide(np.array([1])).tolist() == [True]  # asked only for the boxes that start tracks
    off = FaceStage(replace(PipelineConfig(), track=TrackConfig(look_at_weak=False)), 25.0)
    assert off._weak_look is None

"""devtools/mtcnn_reference.py's stand-in for torchvision's batched_nms (precision.py --mtcnn): the boxes
greedy NMS keeps, best first, class by class; boxes of two classes never suppress each other."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from devtools.mtcnn_reference import _batched_nms  # noqa: E402


def test_batched_nms_keeps_the_best_of_each_overlapping_group_per_class() -> None:
    boxes = torch.tensor([[0, 0, 10, 10], [1, 1, 11, 11], [20, 20, 30, 30], [0, 0, 10, 10]], dtype=torch.float32)
    scores = torch.tensor([0.9, 0.95, 0.5, 0.3])
    classes = torch.tensor([0, 0, 0, 1])
    kept = _batched_nms(boxes, scores, classes, 0.5).tolist()
    # box 1 beats box 0 (IoU 0.68); box 2 overlaps nothing; box 3 is another class, so it stays
    assert kept == [1, 2, 3]
    assert _batched_nms(boxes, scores, classes, 0.7).tolist() == [1, 0, 2, 3]  # 0.68 is under 0.7
    assert _batched_nms(boxes[:0], scores[:0], classes[:0], 0.5).tolist() == []

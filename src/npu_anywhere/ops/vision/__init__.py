"""Vision family: box IoU variants (axis-aligned and rotated), box encoders and decoders, YOLO
anchor assignment, non-maximum suppression variants and ROI pooling.

The modules are grouped by job: ``iou*`` (overlaps and their gradients), ``box_coding*``
(encoders / decoders), ``nms*`` (suppression), ``roi*`` (pooling).
"""

import sys

from ..family import collect

TORCH_NPU_FUNCTIONS, CANN_FUNCTIONS = collect(sys.modules[__name__])

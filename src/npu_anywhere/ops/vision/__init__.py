"""Vision family: box overlaps (IoU, GIoU, DIoU, CIoU), box coders, NMS and ROI ops.

``_boxes`` holds the shared box arithmetic (corner conversion, compute dtypes).
"""

import sys

from ..family import collect

TORCH_NPU_FUNCTIONS, CANN_FUNCTIONS = collect(sys.modules[__name__])

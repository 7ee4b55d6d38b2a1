"""Gradient shapes for PowerSGD: which gradients are matrices, and of what size.

A scenario gives a parameter count, not layers; PowerSGD needs the matrix shapes (it
compresses an m x n gradient to (m + n) r numbers). Two shape models:

- ``square`` (the default): ``parameters // width**2`` matrices of ``width x width`` and the rest as
  1-D tensors (biases, norms), which PowerSGD leaves uncompressed. An approximation: a
  transformer of hidden size d has d x d and d x 4d matrices; give ``width`` near d.
- ``resnet50``: the exact tensors of torchvision's ResNet-50 (He et al. 2016, bottleneck blocks
  [3, 4, 6, 3], 25,557,032 parameters), convolutions reshaped to (out, in * k * k) as
  ``powerSGD_hook`` does (``tensor.view(tensor.shape[0], -1)``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Tuple


@dataclass(frozen=True)
class GradientShapes:
    """Matrix-shaped gradients (rows, cols) and the element count of the 1-D ones."""

    matrices: Tuple[Tuple[int, int], ...]
    vector_elements: int

    @property
    def elements(self) -> int:
        return self.vector_elements + sum(m * n for m, n in self.matrices)


def square(parameters: int, width: int) -> GradientShapes:
    """``parameters // width**2`` width x width matrices, the rest 1-D (module docstring)."""
    count = parameters // (width * width)
    return GradientShapes(((width, width),) * count, parameters - count * width * width)


def resnet50() -> GradientShapes:
    """torchvision.models.resnet50's parameters: conv and fc weights as matrices, BN and biases 1-D."""
    mats: List[Tuple[int, int]] = [(64, 3 * 7 * 7)]
    vec = 2 * 64  # bn1 weight + bias
    inplanes = 64
    for width, blocks in zip((64, 128, 256, 512), (3, 4, 6, 3)):
        for b in range(blocks):
            mats += [(width, inplanes), (width, width * 9), (4 * width, width)]
            vec += 2 * (width + width + 4 * width)
            if b == 0:  # the projection shortcut: 1x1 conv + bn
                mats.append((4 * width, inplanes))
                vec += 2 * 4 * width
            inplanes = 4 * width
    mats.append((1000, 2048))  # fc weight
    vec += 1000  # fc bias
    return GradientShapes(tuple(mats), vec)


def gradient_shapes(model: str, parameters: int, width: int) -> GradientShapes:
    """The shape model by name (``square`` or ``resnet50``)."""
    if model == "resnet50":
        return resnet50()
    return square(parameters, width)

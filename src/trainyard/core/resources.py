"""Bitmask helpers for device sets and the device-class key.

A node's devices are the bits of a Python int (bit i = device i); sets of nodes are ints too
(bit n = node index n). Ints make set algebra, popcount and "lowest member" cheap without any
allocation per device, which is what keeps a 100,000-GPU cycle fast.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

DeviceClass = tuple[str, float]
"""(gpu_type, gpu_memory_gb): GPUs that are interchangeable for a gang."""


def mask_of(indices: Iterable[int]) -> int:
    """The bitmask with the given bit indices set."""
    mask = 0
    for i in indices:
        mask |= 1 << i
    return mask


def bits(mask: int) -> Iterator[int]:
    """Indices of the set bits of `mask`, lowest first."""
    while mask:
        low = mask & -mask
        yield low.bit_length() - 1
        mask ^= low


def lowest(mask: int) -> int:
    """Index of the lowest set bit of a non-zero mask."""
    return (mask & -mask).bit_length() - 1


def lowest_n(mask: int, n: int) -> int:
    """The mask of the `n` lowest set bits of `mask` (which has at least `n` bits)."""
    out = 0
    for _ in range(n):
        low = mask & -mask
        out |= low
        mask ^= low
    return out


def full_mask(n: int) -> int:
    """Mask with bits 0..n-1 set."""
    return (1 << n) - 1

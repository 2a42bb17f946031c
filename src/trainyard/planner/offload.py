"""Activation offloading to host memory: how many of a stage's layers keep their activations on
the GPU, and the time the copies to and from the host leave exposed.

This module owns the offload model (`ParallelLayout.offload_layers`); `memory` counts the
bytes with it, `compute` adds its time, `search` chooses the layer count. Pure arithmetic;
bytes and seconds.

How it runs (Megatron-Core --cpu-offloading-num-layers K, which hands Transformer Engine's
`get_cpu_offload_context` K of the model's layers): each of the first K transformer layers
gives every tensor it saves for the backward pass to an offload handler, which copies it to
pinned host memory on a side stream while the next layer computes, and frees the GPU's copy;
in the backward pass the layer's tensors are copied back while the layer after it runs its
backward. The later layers keep their activations on the GPU: their backward comes first.
Megatron-Core runs it without pipeline parallelism and without recompute (`layout`).

* GPU memory: the K layers' activations leave the GPU but for one layer's, whose copy is in
  flight (out in the forward, back in the backward): a stage of n layers holds n - K + 1
  layers' activations (`resident_layers`).
* Host memory: K layers' activations per GPU, one micro-batch's (without a pipeline one
  micro-batch is in flight; `memory.MemoryBreakdown.offloaded`).
* Time (`exposed_s`): a layer's copy, its activation bytes over the GPU's link to host memory
  (`GPU.host_link_gb_s`), hides behind the next layer's forward going out and behind a
  layer's backward (two forwards' work) coming back; per micro-batch the K layers expose
  K·(max(0, c - f) + max(0, c - 2f)) for a copy of c seconds and a forward of f.

Megatron-Bridge's DGX-GB200 and DGX-GB300 runs of Llama 3 70B with Megatron-FSDP offload 40
and 20 of the 80 layers to the Grace CPU's memory (`data/published_runs.csv`); on NVLink-C2C
the copies hide behind the compute, on PCIe Gen5 (64 GB/s) they would not.
"""

from __future__ import annotations

from trainyard.planner.errors import PlannerError
from trainyard.planner.hardware import GPU

__all__ = ["exposed_s", "resident_layers"]


def resident_layers(layers: int, offload: int) -> int:
    """Layers of a stage of `layers` whose activations are on the GPU at the peak when `offload`
    of them are offloaded: the others and the one whose copy is in flight."""
    if offload <= 0:
        return layers
    return layers - min(offload, layers) + 1


def exposed_s(layer_bytes: float, forward_s: float, offload: int, gpu: GPU) -> float:
    """Seconds per micro-batch the copies of `offload` layers of `layer_bytes` activation bytes
    each leave exposed, out behind a forward of `forward_s` and back behind a backward of twice
    that (see the module docstring). Raises `PlannerError` when the GPU's host link is unknown."""
    if offload <= 0:
        return 0.0
    if gpu.host_link_gb_s <= 0:
        raise PlannerError(
            "offload_layers",
            f"{gpu.name}'s link to host memory is unknown: set host_link_gb_s in the GPU "
            "catalogue, or offload 0 layers",
        )
    copy = layer_bytes / (gpu.host_link_gb_s * 1e9)
    return offload * (max(0.0, copy - forward_s) + max(0.0, copy - 2.0 * forward_s))

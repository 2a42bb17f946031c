"""trainyard.sdk: the in-job training SDK (checkpoints, progress reports, stop notices).

A plain DDP training loop, with the lines the SDK adds (see docs/sdk.md)::

    import torch.distributed as dist
    from trainyard import sdk

    sdk.init_distributed()                        # gloo or nccl; also run plainly
    model = build_model().to(sdk.device())
    ddp = DistributedDataParallel(model)
    ckpt = sdk.AsyncCheckpointer(keep=3)          # TRAINYARD_CHECKPOINT_DIR
    reporter, notices = sdk.Reporter(), sdk.Notices()
    start = 0
    if (found := ckpt.load()) is not None:        # resume: every rank loads the latest
        start, state = found
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
    for step in range(start + 1, steps + 1):
        t0 = time.perf_counter()
        loss = train_step(ddp, opt, step)
        reporter.step(time.perf_counter() - t0, batch=global_batch, loss=loss.item())
        state = {"model": model.state_dict(), "opt": opt.state_dict()}
        if notices.requested_by_any():            # preempt / resize / stop
            sdk.exit_after_checkpoint(ckpt, step, state)   # exits 85: restart me
        if step % 100 == 0:
            ckpt.save(step, state)                # returns once copied to CPU

Importing it does not import torch; the parts that need torch import it when used.
"""

from trainyard.sdk.checkpoint import (
    AsyncCheckpointer,
    CheckpointError,
    LocalDirectory,
    Storage,
    checkpoint_name,
)
from trainyard.sdk.env import (
    attempt,
    backend,
    checkpoint_dir,
    device,
    init_distributed,
    job_id,
    local_rank,
    local_world_size,
    node_rank,
    nodes,
    rank,
    under_trainyard,
    virtual_gpus,
    world_size,
)
from trainyard.sdk.notices import EXIT_CHECKPOINTED, Notices, exit_after_checkpoint
from trainyard.sdk.report import Reporter
from trainyard.sdk.scaling import accumulation, local_batch, scale_lr

__all__ = [
    "EXIT_CHECKPOINTED",
    "AsyncCheckpointer",
    "CheckpointError",
    "LocalDirectory",
    "Notices",
    "Reporter",
    "Storage",
    "accumulation",
    "attempt",
    "backend",
    "checkpoint_dir",
    "checkpoint_name",
    "device",
    "exit_after_checkpoint",
    "init_distributed",
    "job_id",
    "local_batch",
    "local_rank",
    "local_world_size",
    "node_rank",
    "nodes",
    "rank",
    "scale_lr",
    "under_trainyard",
    "virtual_gpus",
    "world_size",
]

"""The job specification: what a user submits (``trainyard submit job.yaml``, ``POST /jobs``).

This package owns the job spec format, its validation and its conversions: `parse_job_spec`
turns YAML/JSON text or a mapping into an immutable `JobSpec`, or raises `JobSpecError` whose
``field`` is the dotted path of the value at fault and whose message says how to fix it
(``str(error) == "field: message"``). It never lets another exception escape for user input.
`resolve(spec)` lets the planner choose the GPU count of a ``model:`` spec,
`JobSpec.to_core_job` gives the scheduling core's `Job`, and `JobSpec.to_dict` / `to_json`
store a spec as JSON (`spec_from_dict` / `spec_from_json` read it back). Modules: `errors`
(`JobSpecError`), `fields` (the YAML loader and value converters), `spec` (`JobSpec`,
`Limits`: data only), `parse` (the rules), `resolve` (the planner's part).

The format
==========

A YAML (or JSON) mapping. Only ``name`` and ``command`` are required::

    name: mnist-ddp                 # required
    queue: research                 # default "default"
    command: [python, train.py, --epochs, 3]   # or one string, split like a shell
    workers: 2                      # processes (ranks) per node
    gpus: 2                         # total GPUs of the job; 0: CPU-only
    cpus: 8
    memory_gb: 32
    max_restarts: 3
    env: {OMP_NUM_THREADS: 4}

Fields (null is the same as leaving a field out). Counts are whole numbers (``2.0`` reads as
2) between -2^31 and 2^31-1; ``1e3``, which YAML 1.1 reads as a string, is read as a number.
Duplicate keys are an error. JSON is accepted as well (it is YAML).

- ``name`` (required): 1-63 lowercase letters, digits and ``-``, starting with a letter and
  ending with a letter or digit (a DNS label).
- ``queue`` (default ``default``): the queue the job is charged to; letters, digits, ``.``,
  ``_``, ``-``. The server checks that the queue exists (`parse_job_spec(..., queues=...)`).
- ``command`` (required): a list of arguments (numbers are taken as written), or a string split
  with shell rules (`shlex.split`). It is executed directly, not through a shell.
- ``workers`` (default 1, >= 1): processes per node, i.e. torchrun's ranks per node.
- ``nodes`` (default 1, >= 1): nodes of the job; the job has ``workers x nodes`` ranks.
  More than one node needs an executor that spans machines.
- ``gpus`` (default 0, >= 0): the **total** number of GPUs of the job (what the scheduler
  allocates as one gang). When > 0 it must be a multiple of ``workers x nodes``: every rank
  gets ``gpus / (workers x nodes)`` devices (usually 1). 0 runs on CPUs only.
- ``gpu_type`` (optional): the device type, e.g. ``H100`` (any type when absent).
- ``gpu_memory_gb`` (optional, > 0): minimum memory per device.
- ``cpus``, ``memory_gb`` (optional, > 0): for the whole job, split across its nodes; absent
  means nothing is reserved.
- ``resources`` (optional): a mapping that may hold ``gpus``, ``gpu_type``, ``gpu_memory_gb``,
  ``cpus`` and ``memory_gb`` instead of the top level (each given in one place only; errors
  then name ``resources.gpus``).
- ``priority`` (default 0, integer): higher runs first and may preempt lower.
- ``preemptible`` (default true): whether the scheduler may stop the job for another.
- ``wait_for_capacity`` (default false): accept the job even when no set of the cluster's
  nodes could run it today (too many GPUs, a GPU type or size no node has), to wait for
  nodes that may join; without it such a spec is refused at submit, as Slurm refuses a job
  no partition can satisfy.
- ``max_restarts`` (default 3, >= 0): restarts after a failure before the job is failed.
- ``min_runtime_s`` (default 0, >= 0): seconds a started job runs before it may be preempted.
- ``expected_duration_s`` (optional, > 0): run-time estimate in seconds (backfill, reservations).
- ``resume_from`` (optional): the id of an ended job of yours; the new job's checkpoint
  directory (``TRAINYARD_CHECKPOINT_DIR``) starts as a copy of that job's, so it goes on from
  its last checkpoint (``submit --resume-from JOB``; the local executor only).
- ``time_limit_s`` (optional, > 0): an attempt that has run this long is stopped (the notice
  ``stop`` and SIGTERM, then SIGKILL after the grace period) and the job fails with the
  reason ``time limit``, not retried (Slurm's TIMEOUT); ``submit -t`` sets it and the
  estimate together, as ``sbatch -t`` is both.
- ``topology`` (optional): the level the gang must stay inside: ``island`` (one NVLink island),
  ``node``, or a level of the cluster's topology (``leaf``, ``spine``...). ``island`` and
  ``node`` need ``nodes: 1``.
- ``env`` (optional): NAME: value; names are letters, digits and ``_`` (not starting with a
  digit); numbers are taken as written, booleans must be quoted. Names trainyard sets itself are
  refused: torchrun's (``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``, ``LOCAL_WORLD_SIZE``,
  ``GROUP_RANK``, ``GROUP_WORLD_SIZE``, ``ROLE_*``, ``NODE_RANK``, ``MASTER_ADDR``,
  ``MASTER_PORT``), ``CUDA_VISIBLE_DEVICES``, ``NVIDIA_VISIBLE_DEVICES``, and everything
  starting ``TRAINYARD_`` or ``TORCHELASTIC_`` (except ``TRAINYARD_PLAN_*`` in a ``model:``
  spec, which `resolve` replaces with the planner's values).
- ``working_dir`` (optional): the directory the command runs in.
- ``visible_devices`` (default ``node``): ``node`` gives every rank all of the job's
  devices on its node in ``CUDA_VISIBLE_DEVICES``, as torchrun does, so the usual
  ``torch.cuda.set_device(LOCAL_RANK)`` works (``TRAINYARD_RANK_DEVICES`` lists a rank's
  own positions when it has several); ``rank`` shows each rank only its own devices.
- ``checkpoint_every`` (optional, >= 1): steps between checkpoints; informational (shown to
  people, available to the executor), the job itself writes its checkpoints.

Elastic jobs
------------

``elastic:`` (optional) lets the scheduler start the job at, and (with live resize) move it to,
any size in a range, adapting the batch if allowed (`trainyard.jobspec.elastic`)::

    gpus: 2                     # the size it asks for first (default: min_gpus)
    elastic: {min_gpus: 1, max_gpus: 8, batch_size: 256, max_batch_size: 2048}

Keys: ``max_gpus`` (required), ``min_gpus`` (default: the GPUs of one rank), ``batch_size``
(the global batch), ``max_batch_size`` (the batch may grow up to it; absent: a fixed global
batch), ``max_local_batch_size`` (per GPU); whole numbers >= 1. ``min_gpus <= gpus <=
max_gpus``, both bounds multiples of the GPUs of one rank (``gpus / (workers x nodes)``): at k
GPUs the job runs k / (GPUs per rank) ranks. Not with ``model:`` or a CPU-only job.

Dependencies and arrays
-----------------------

``after:`` (optional) holds the job until others are done; ``array:`` (optional) makes one
job per index (`trainyard.jobspec.depends`)::

    after: [j-4f2a9c, {job: a-77b1d0, condition: any}]   # ok (default): must succeed
    array: 0-9%4                # indexes 0..9 (also 1,3,5 or 0-99:2), at most 4 at once

A dependency is a job id or an array id (every member of the array), of the submitter's
tenant. With ``ok`` the job starts once the dependency succeeded and is cancelled if it
failed or was cancelled; with ``any`` it starts once the dependency ended, however. Each
member of an array gets ``TRAINYARD_ARRAY_INDEX`` and ``TRAINYARD_ARRAY_ID``; an array has
at most ``max_array_size`` (10,000) jobs.

The planner form
----------------

Instead of ``gpus`` a spec may name the model it trains and let the planner choose the GPU
count, layout and launcher settings (see `trainyard.planner.jobplan`)::

    name: pretrain-125m
    command: [torchrun-wrapper, pretrain.py]
    model: gpt3-125m          # a preset, a YAML file (relative to the spec) or a mapping
    gpu_type: H100            # required with model:
    planner: {max_gpus: 8, objective: time}   # max_gpus required without gpus:

``planner`` keys: ``max_gpus``, ``nodes_of`` (GPUs per node, default 8) (integers >= 1),
``tokens``, ``price_per_gpu_hour``, ``deadline_hours`` (numbers > 0), ``objective`` (``time``
or ``cost``), ``flash_attention`` (true or false, default true: the job's attention is fused and
stores no score matrix). Without ``gpus``, ``workers`` and ``nodes`` are chosen too (one worker
per GPU, ``nodes_of`` per node) and must not be given. With ``gpus`` the planner only chooses
the layout.
`resolve(spec)` runs the planner and returns the spec with ``gpus``, ``workers``, ``nodes``
set and ``env`` extended with ``TRAINYARD_PLAN_*`` and ``NCCL_*`` (``NCCL_*`` given by the user
win); with ``planner.tokens`` and no ``expected_duration_s``, the predicted training time becomes
``expected_duration_s``. Until then `JobSpec.gpus` is None and `to_core_job` refuses the spec.

Limits
------

`Limits` bounds one job (``max_gpus_per_job``, ``max_gpus_per_node``, ``max_nodes``,
``max_workers`` per node, ``max_cpus``, ``max_memory_gb``, ``max_command_length``,
``max_env_entries``, ``max_restarts``, ``max_spec_bytes``); a request above a limit is an error
naming the field, the limit and the fix. `Limits()` are generous defaults that catch mistakes;
`Limits.none()` switches every check off (used by `spec_from_dict` for stored specs).
"""

from trainyard.jobspec.errors import JobSpecError
from trainyard.jobspec.parse import parse_job_spec, spec_from_dict, spec_from_json, unknown_queue
from trainyard.jobspec.resolve import PlanFunction, resolve, resolve_plan
from trainyard.jobspec.spec import (
    FIELDS,
    RESERVED_ENV,
    RESERVED_ENV_PREFIXES,
    RESOURCE_FIELDS,
    JobSpec,
    Limits,
)

__all__ = [
    "FIELDS",
    "RESERVED_ENV",
    "RESERVED_ENV_PREFIXES",
    "RESOURCE_FIELDS",
    "JobSpec",
    "JobSpecError",
    "Limits",
    "PlanFunction",
    "parse_job_spec",
    "resolve",
    "resolve_plan",
    "spec_from_dict",
    "spec_from_json",
    "unknown_queue",
]

"""The scheduler loop of the control plane: database -> core -> database -> executor.

- `platform`: `Platform.step()`, one turn of the loop (observe the executor's runs, schedule,
  act on the decision), and `recover()` for a server start; `step_report`: what a turn did.
- `scheduling`: one scheduling round on the database (`load_snapshot`, the pure core,
  `write_decision` in one transaction); `cluster_rows`: the nodes and queues it reads.
- `pending`: the pending queue as a round reads it, cached between rounds by row version.
"""

"""A `Decision` as JSON: the output format of `trainyard schedule --json` (docs/scenarios.md).

`decision_to_dict` is deterministic: same decision, same dict, keys always in the same order.
"""

from __future__ import annotations

import json
from typing import Any

from trainyard.core import Decision, NodeDevices

__all__ = ["decision_to_dict", "decision_to_json"]


def _devices(nodes: tuple[NodeDevices, ...]) -> list[dict[str, Any]]:
    return [{"node": nd.node, "devices": list(nd.devices)} for nd in nodes]


def decision_to_dict(decision: Decision) -> dict[str, Any]:
    """A JSON-ready dict of `decision` with a fixed key order (see docs/scenarios.md)."""
    return {
        "profile": decision.profile,
        "now": decision.now,
        "placements": [
            {
                "job": p.job_id,
                "queue": p.queue,
                "gpus": p.gpus,
                "gpu_type": p.gpu_type,
                "action": p.action,
                "nodes": _devices(p.nodes),
                "after_evictions": list(p.after_evictions),
            }
            for p in decision.placements
        ],
        "evictions": [
            {
                "job": e.job_id,
                "queue": e.queue,
                "gpus": e.gpus,
                "action": e.action,
                "for_job": e.for_job,
                "reason": e.reason,
            }
            for e in decision.evictions
        ],
        "reservations": [
            {"job": r.job_id, "start_time": r.start_time, "nodes": _devices(r.nodes)}
            for r in decision.reservations
        ],
        "pending": {
            jid: {"code": r.code, "message": r.message, "estimated_start": r.estimated_start}
            for jid, r in decision.pending.items()
        },
        "resizes": [
            {
                "job": z.job_id,
                "queue": z.queue,
                "from_gpus": z.from_gpus,
                "gpus": z.gpus,
                "nodes": _devices(z.nodes),
                "reason": z.reason,
                "after_evictions": list(z.after_evictions),
            }
            for z in decision.resizes
        ],
        "not_grown": {
            jid: {"reason": n.reason, "until": n.until} for jid, n in decision.not_grown.items()
        },
    }


def decision_to_json(decision: Decision) -> str:
    """`decision_to_dict` as indented JSON text (ends with a newline)."""
    return json.dumps(decision_to_dict(decision), indent=2) + "\n"

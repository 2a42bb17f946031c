"""A guarantee is guaranteed (hypothesis): once cycles have settled (each on the applied
result of the last, same clock), no job whose queue is below its guarantee, and would stay
within it, waits on `capacity` while some node could hold it if borrowed work there were
evicted (work of other queues that hold more than their guarantee, preemptible, past its
`min_runtime`)."""

from __future__ import annotations

from checks import check_decision
from hypothesis import given, settings
from strategies import owed_snapshots

from trainyard.core import Snapshot, apply_decision, get_profile, run_cycle
from trainyard.core.plugins.job_orders import las_level

PROFILES_WITH_RECLAIM = ("default", "drf")


def _settled(snapshot: Snapshot, profile: str) -> tuple[Snapshot, object]:
    for _ in range(12):
        decision = run_cycle(snapshot, profile)
        check_decision(snapshot, decision, profile)
        if decision.is_empty:
            return snapshot, decision
        snapshot = apply_decision(snapshot, decision)
    raise AssertionError("no fixed point within 12 cycles")


@settings(max_examples=200)
@given(owed_snapshots())
def test_an_owner_below_its_guarantee_is_never_left_waiting_on_capacity(
    snapshot: Snapshot,
) -> None:
    for profile in PROFILES_WITH_RECLAIM:
        settled, decision = _settled(snapshot, profile)
        usage = {q.name: 0 for q in settled.queues}
        for r in settled.running:
            usage[r.job.queue] += r.job.gpus
        guaranteed = {q.name: q.guaranteed for q in settled.queues}
        prof = get_profile(profile)
        for job in settled.pending:
            reason = decision.pending[job.id]  # type: ignore[attr-defined]
            if reason.code != "capacity":
                continue
            if usage[job.queue] + job.gpus > guaranteed[job.queue]:
                continue  # not owed: it would go past its queue's guarantee
            for node in settled.nodes:
                held = {d for r in settled.running for nd in r.placement if nd.node == node.name
                        for d in nd.devices}  # fmt: skip
                borrowed = sum(
                    r.job.gpus
                    for r in settled.running
                    if r.placement[0].node == node.name
                    and r.job.queue != job.queue
                    and usage[r.job.queue] > guaranteed[r.job.queue]
                    and r.job.preemptible
                    and settled.now - r.started_at >= r.job.min_runtime
                )
                room = node.gpus - len(held) + borrowed
                assert room < job.gpus, (
                    f"{profile}: {job.id} ({job.gpus} GPUs, queue {job.queue} at "
                    f"{usage[job.queue]}/{guaranteed[job.queue]}) waits on capacity "
                    f"({reason.message}) but node {node.name} could hold it by evicting "
                    f"{borrowed} borrowed GPUs (LAS level {las_level(job, prof)})"
                )

"""What running jobs report about themselves (issue 15): measured steps and progress.

`JobObservation`: one row per (job, GPUs, nodes, global batch) the job has run at: its mean
seconds per step there (`step_time`, over `steps` steps). The scheduler passes them to the
core's goodput model as `StepSample`s, so resize decisions use measured throughput.
`JobProgress`: the job's latest report: steps and samples so far, loss, the gradient noise
statistics (`grad_sqr`, `grad_var`; Pollux's statistical efficiency), and the world size it
reported from. `JobReportSample`: the reports over time, at most one every
`services/reports.SAMPLE_EVERY_S` per job and attempt (and one whenever the world size
changes), for the console's charts (world size, throughput, goodput and loss over time).
Written by `services/reports.py` only; all three go with their job.
"""

from __future__ import annotations

from sqlalchemy import BigInteger, ForeignKey, Index, String
from sqlalchemy.orm import Mapped, mapped_column

from trainyard.server.db.base import Base, Timestamp


class JobObservation(Base):
    __tablename__ = "job_observations"

    job_id: Mapped[str] = mapped_column(
        String(32), ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True
    )
    gpus: Mapped[int] = mapped_column(primary_key=True)
    nodes: Mapped[int] = mapped_column(primary_key=True)
    batch: Mapped[int] = mapped_column(primary_key=True)
    step_time: Mapped[float]
    steps: Mapped[int]
    updated_at: Mapped[float] = mapped_column(Timestamp)


class JobProgress(Base):
    __tablename__ = "job_progress"

    job_id: Mapped[str] = mapped_column(
        String(32), ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True
    )
    attempt: Mapped[int]
    world_size: Mapped[int]
    step: Mapped[int] = mapped_column(BigInteger)
    samples: Mapped[int] = mapped_column(BigInteger)
    loss: Mapped[float | None]
    grad_sqr: Mapped[float | None]
    grad_var: Mapped[float | None]
    # samples the job said it still has to train (None: it never said)
    remaining_samples: Mapped[int | None] = mapped_column(BigInteger, default=None)
    updated_at: Mapped[float] = mapped_column(Timestamp)


class JobReportSample(Base):
    __tablename__ = "job_report_samples"
    __table_args__ = (Index("ix_job_report_samples_job_id_time", "job_id", "time"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    job_id: Mapped[str] = mapped_column(String(32), ForeignKey("jobs.id", ondelete="CASCADE"))
    time: Mapped[float] = mapped_column(Timestamp)
    attempt: Mapped[int]
    world_size: Mapped[int]
    gpus: Mapped[int]
    batch: Mapped[int]
    step_time: Mapped[float]  # mean seconds per step since the previous report
    step: Mapped[int] = mapped_column(BigInteger)
    samples: Mapped[int] = mapped_column(BigInteger)
    loss: Mapped[float | None]
    grad_sqr: Mapped[float | None]
    grad_var: Mapped[float | None]

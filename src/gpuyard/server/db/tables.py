"""The store's tables. Times are UTC epoch seconds (float), the clock's unit everywhere."""

from __future__ import annotations

from typing import Any, ClassVar

from sqlalchemy import JSON, BigInteger, Boolean, Float, ForeignKey, Index, Integer, String, Text
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

__all__ = ["Base", "EventRow", "JobRow", "NodeRow", "WorkerRow"]


class Base(DeclarativeBase):
    type_annotation_map: ClassVar[dict[Any, Any]] = {dict[str, Any]: JSON, list[Any]: JSON}


class JobRow(Base):
    __tablename__ = "jobs"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(128))
    owner: Mapped[str] = mapped_column(String(64))
    state: Mapped[str] = mapped_column(String(16))
    version: Mapped[int] = mapped_column(Integer, default=0)
    priority: Mapped[str] = mapped_column(String(16))
    spec: Mapped[dict[str, Any]] = mapped_column(JSON)
    attempt: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[float] = mapped_column(Float)
    started_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    finished_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    exit_code: Mapped[int | None] = mapped_column(Integer, nullable=True)
    reason: Mapped[str | None] = mapped_column(Text, nullable=True)
    placement: Mapped[list[Any] | None] = mapped_column(JSON, nullable=True)
    token: Mapped[str | None] = mapped_column(String(64), nullable=True)
    """A secret of the current attempt, shared by its workers (e.g. MPI's remote launch)."""

    __table_args__ = (
        Index("ix_jobs_state", "state"),
        Index("ix_jobs_owner", "owner"),
        Index("ix_jobs_name", "name"),
    )


class EventRow(Base):
    __tablename__ = "job_events"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"))
    time: Mapped[float] = mapped_column(Float)
    kind: Mapped[str] = mapped_column(String(32))
    actor: Mapped[str] = mapped_column(String(96))
    from_state: Mapped[str | None] = mapped_column(String(16), nullable=True)
    to_state: Mapped[str | None] = mapped_column(String(16), nullable=True)
    reason: Mapped[str] = mapped_column(Text, default="")
    node: Mapped[str | None] = mapped_column(String(128), nullable=True)
    attempt: Mapped[int] = mapped_column(Integer, default=0)

    __table_args__ = (Index("ix_job_events_job", "job_id", "id"),)


class WorkerRow(Base):
    __tablename__ = "workers"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"))
    attempt: Mapped[int] = mapped_column(Integer)
    rank: Mapped[int] = mapped_column(Integer)
    node: Mapped[str] = mapped_column(String(128))
    role: Mapped[str] = mapped_column(String(16), default="worker")
    task: Mapped[int] = mapped_column(Integer, default=0)
    primary: Mapped[bool] = mapped_column(Boolean, default=True)
    """Whether its exit decides the job (False for MPI targets and parameter servers)."""
    state: Mapped[str] = mapped_column(String(16))
    handle: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    exit_code: Mapped[int | None] = mapped_column(Integer, nullable=True)
    detail: Mapped[str | None] = mapped_column(Text, nullable=True)
    started_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    finished_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    terminate_sent_at: Mapped[float | None] = mapped_column(Float, nullable=True)

    __table_args__ = (
        Index("ux_workers_job_attempt_rank", "job_id", "attempt", "rank", unique=True),
        Index("ix_workers_state", "state"),
    )


class NodeRow(Base):
    __tablename__ = "nodes"

    name: Mapped[str] = mapped_column(String(128), primary_key=True)
    address: Mapped[str] = mapped_column(String(64))
    state: Mapped[str] = mapped_column(String(16))
    executor: Mapped[str] = mapped_column(String(32))
    gpus: Mapped[int] = mapped_column(Integer)
    gpu_model: Mapped[str] = mapped_column(String(128), default="")
    gpu_devices: Mapped[list[Any]] = mapped_column(JSON)
    cpus: Mapped[float] = mapped_column(Float)
    memory: Mapped[int] = mapped_column(BigInteger)
    labels: Mapped[dict[str, Any]] = mapped_column(JSON)
    updated_at: Mapped[float] = mapped_column(Float)

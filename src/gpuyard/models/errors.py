"""The body of every error the API answers with, as one schema.

Every 4xx and 5xx of ``/api/v1`` is ``{"code", "detail"}``, whichever part of the server answers:
the central handlers (``server.errors``), the request guard (oversize, bad JSON, a crash) and
the router's own refusals (an unknown path, a method the path does not have). A validation
error adds ``errors``, one entry per problem with where it is; some errors add facts a client
can act on (a job's ``state``, a group's urgent ``count`` and ``limit``). The OpenAPI document
names this model for every error response (``server.openapi``).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from gpuyard.models.states import JobState

__all__ = ["ErrorBody", "FieldError"]


class FieldError(BaseModel):
    """One problem of a refused request, and where it is."""

    loc: list[str | int] = Field(
        description='Where: the part ("body", "query", "path", "header") then the field, e.g. '
        '["body", "resources", "gpus"] or ["body", "jobs", 3, "command"].'
    )
    msg: str = Field(description="What is wrong with it.")


class ErrorBody(BaseModel):
    """Why a request was refused or failed. ``code`` is stable (clients map it back to the
    same error class, see ``gpuyard.errors``); ``detail`` is for people and says what to do."""

    # Errors may grow facts; a client must ignore those it does not know.
    model_config = ConfigDict(extra="allow")

    code: str = Field(
        description="not_found, conflict, illegal_transition, stale_write, permission_denied, "
        "unauthenticated, invalid_spec, too_large, method_not_allowed, bad_request, internal.",
        examples=["not_found"],
    )
    detail: str = Field(description="What went wrong and how to fix it.")
    errors: list[FieldError] | None = Field(
        None, description="A refused request's problems, one each (422 only)."
    )
    state: JobState | None = Field(
        None, description="The job's state, when a job's state is why (409)."
    )
    target: JobState | None = Field(
        None, description="The state a refused transition asked for (409 illegal_transition)."
    )
    count: int | None = Field(
        None, description="A group's running and queued urgent jobs (409 over its limit)."
    )
    limit: int | None = Field(None, description="The group's urgent limit (409 over it).")

"""The most a request may give for a number the store keeps in an INTEGER column.

Ids (of jobs, events, tokens, audit entries), attempts and the limits an admin sets (a group's
urgent limit, a quota's nodes and GPUs) are INTEGER columns, 32-bit on PostgreSQL. A larger
number would reach the database and fail there, as a 500; bounded at the edge it is a 422 that
names the field and the limit, and an id beyond it is one that cannot exist.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

__all__ = ["MAX_ID", "MAX_INT32", "Id"]

MAX_INT32 = (1 << 31) - 1
MAX_ID = MAX_INT32
"""The largest id the store can hold."""

Id = Annotated[int, Field(ge=1, le=MAX_ID)]

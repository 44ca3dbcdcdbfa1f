"""The wire types of a user's registry logins: what the pool keeps so that a copy from a
registry the admin listed needs no credentials each time (docs/images.md, "Registry
logins"). The password goes in, never out: a login is shown as its host, user name and
when it was saved."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field, SecretStr

__all__ = ["RegistryLoginSave", "RegistryLoginView"]


class RegistryLoginSave(BaseModel):
    """A login to save (the registry host is the path's)."""

    username: str = Field(
        min_length=1,
        max_length=256,
        pattern=r"^[^:\x00-\x1f\x7f]+$",
        description="Your user name at that registry (no ':' or control characters).",
    )
    password: SecretStr = Field(
        min_length=1,
        max_length=4096,
        description="Its password or token: checked with the registry, kept encrypted, never "
        "shown back.",
    )


class RegistryLoginView(BaseModel):
    """A saved login, without its password."""

    host: str
    username: str
    saved_at: datetime

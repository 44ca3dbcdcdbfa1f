"""The base of every wire and domain type: a pydantic model whose validators are built when
first used, not when its module is imported. A CLI command uses one or two of the 70-odd
models; building all of them at import was about a third of every command's start."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

__all__ = ["Model"]


class Model(BaseModel):
    """:class:`pydantic.BaseModel`, built on first use (``defer_build``)."""

    model_config = ConfigDict(defer_build=True)

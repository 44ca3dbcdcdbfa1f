"""Every model of gpuyard.models derives from models.base.Model, so that none is built at
import (a CLI command's start pays only for the models it uses)."""

from __future__ import annotations

import importlib
import pkgutil

from pydantic import BaseModel

import gpuyard.models
from gpuyard.models.base import Model


def _models() -> list[type[BaseModel]]:
    found = []
    for info in pkgutil.iter_modules(gpuyard.models.__path__, "gpuyard.models."):
        module = importlib.import_module(info.name)
        for value in vars(module).values():
            if isinstance(value, type) and issubclass(value, BaseModel) and value is not Model:
                if value.__module__ == info.name:
                    found.append(value)
    return found


def test_every_model_is_deferred() -> None:
    models = _models()
    assert len(models) > 50
    assert [m.__name__ for m in models if not issubclass(m, Model)] == []
    assert all(m.model_config.get("defer_build") for m in models)

"""Pydantic's errors as sentences: the refused value is shown, except a secret's."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from gpuyard.models.image_catalogue import ImageCopy
from gpuyard.models.registry_login import RegistryLoginSave
from gpuyard.models.validation import readable_validation_errors


def _message(model: type[RegistryLoginSave | ImageCopy], **body: object) -> str:
    with pytest.raises(ValidationError) as refused:
        model.model_validate(body)
    return readable_validation_errors(refused.value.errors())


def test_a_refused_password_is_not_repeated_but_other_values_are() -> None:
    message = _message(RegistryLoginSave, username="a:b", password="x" * 5000)
    assert "username:" in message and "(got 'a:b')" in message
    assert "password:" in message and "xxxx" not in message
    copy = _message(ImageCopy, source="h/r:1", name="n", username="u", password=["hunter2"])
    assert "password:" in copy and "hunter2" not in copy

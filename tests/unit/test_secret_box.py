"""The pool's secret key: made once, 0600, shared by every box over the same file; a missing,
different or malformed key opens nothing and says so without the secret."""

from __future__ import annotations

from pathlib import Path

import pytest
from cryptography.fernet import Fernet

from gpuyard.secret_box import SecretBox, Unreadable


def test_a_key_is_made_once_private_and_shared_through_its_file(tmp_path: Path) -> None:
    key_file = tmp_path / "home" / "secrets.key"
    first = SecretBox(key_file)
    sealed = first.seal("hunter2")
    assert "hunter2" not in sealed and key_file.stat().st_mode & 0o777 == 0o600
    key = key_file.read_bytes()
    second = SecretBox(key_file)
    assert second.open(sealed) == "hunter2"
    second.seal("again")
    assert key_file.read_bytes() == key  # never replaced
    assert [p.name for p in key_file.parent.iterdir()] == ["secrets.key"]  # no temporary left


def test_a_key_made_meanwhile_by_another_process_wins(tmp_path: Path) -> None:
    key_file = tmp_path / "secrets.key"
    theirs = Fernet.generate_key()
    key_file.write_bytes(theirs)
    assert SecretBox(key_file)._make() == theirs


def test_a_missing_other_or_malformed_key_opens_nothing(tmp_path: Path) -> None:
    key_file = tmp_path / "secrets.key"
    sealed = SecretBox(key_file).seal("hunter2")
    key_file.unlink()
    with pytest.raises(Unreadable, match="is missing"):
        SecretBox(key_file).open(sealed)
    assert not key_file.exists()  # reading never makes a key
    key_file.write_bytes(Fernet.generate_key())
    with pytest.raises(Unreadable, match="sealed with another key") as other:
        SecretBox(key_file).open(sealed)
    key_file.write_text("not a key\n")
    with pytest.raises(Unreadable, match="does not hold a key") as malformed:
        SecretBox(key_file).seal("x")
    assert "hunter2" not in str(other.value) + str(malformed.value)
    assert "SecretBox(" in repr(SecretBox(key_file))

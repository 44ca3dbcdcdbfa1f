"""Whose socket listens on a port, from /proc/net/tcp and tcp6 (what the proxy asks before it
forwards to an interactive job's port: docs/interactive.md)."""

from __future__ import annotations

import os
import socket

from gpuyard.executors.local.procfs import listener_uid


def test_the_listening_sockets_account_is_found_on_its_address_and_the_wildcard() -> None:
    with socket.socket() as mine:
        mine.bind(("127.0.0.1", 0))
        port = mine.getsockname()[1]
        assert listener_uid("127.0.0.1", port) is None  # bound, not listening
        mine.listen()
        assert listener_uid("127.0.0.1", port) == os.getuid()
        assert listener_uid("127.0.0.2", port) is None  # another address, this port
    with socket.socket() as everywhere:
        everywhere.bind(("0.0.0.0", 0))  # noqa: S104 - the wildcard is what is tested
        everywhere.listen()
        assert listener_uid("127.0.0.9", everywhere.getsockname()[1]) == os.getuid()
    with socket.socket(socket.AF_INET6) as six:
        six.bind(("::1", 0))
        six.listen()
        assert listener_uid("::1", six.getsockname()[1]) == os.getuid()

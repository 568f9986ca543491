"""Who holds a port: a specific address shares a port number with another specific one."""

from __future__ import annotations

import os
import socket

import pytest

from maccli.output import CliError
from maccli.runtimes.base import ServiceSpec
from maccli.runtimes.ports import check_port_free, listener
from testkit.ports import free_port


@pytest.fixture
def listening():
    port = free_port("127.0.0.2")
    with socket.socket() as sock:
        sock.bind(("127.0.0.2", port))
        sock.listen()
        yield port


def test_it_names_this_process_as_the_holder_on_the_same_address(listening):
    pid, command = listener(listening, "127.0.0.2")
    assert pid == os.getpid()
    assert "python" in command or "pytest" in command


def test_a_wildcard_bind_collides_with_any_listener(listening):
    assert listener(listening, "0.0.0.0") is not None
    assert listener(listening, "") is not None


def test_another_specific_address_does_not_collide(listening):
    assert listener(listening, "127.0.0.3") is None
    check_port_free("agent", ServiceSpec("nic-exporter", [], port=listening, bind="127.0.0.3"))


def test_a_taken_port_is_refused_with_the_holder_and_the_fix(listening):
    spec = ServiceSpec("nic-exporter", [], port=listening, bind="127.0.0.2")
    with pytest.raises(CliError) as caught:
        check_port_free("agent", spec)
    assert f"port {listening} is already in use by pid {os.getpid()}" in str(caught.value)
    assert caught.value.commands[0] == f"kill {os.getpid()}"

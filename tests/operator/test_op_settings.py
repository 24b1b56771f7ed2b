"""Process settings: where the operator's servers listen (port-forward must reach them)."""
from __future__ import annotations

import socket
import urllib.request

from grappa_operator import metrics
from grappa_operator.__main__ import parse_args
from grappa_operator.settings import OperatorSettings


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_servers_bind_all_interfaces_even_in_a_pod(monkeypatch):
    # POD_IP is what the chart used to bind to: port-forward (127.0.0.1 in the pod) was refused.
    monkeypatch.setenv("POD_IP", "127.0.0.2")  # not 127.0.0.1: binding it would refuse 127.0.0.1
    monkeypatch.delenv("GRAPPA_BIND_ADDRESS", raising=False)
    assert OperatorSettings.from_env().bind_address == "0.0.0.0"
    assert parse_args([]).bind_address == "0.0.0.0"


def test_bind_address_override(monkeypatch):
    monkeypatch.setenv("GRAPPA_BIND_ADDRESS", "127.0.0.3")
    assert parse_args([]).bind_address == "127.0.0.3"
    assert parse_args(["--bind-address", "::"]).bind_address == "::"
    monkeypatch.setenv("GRAPPA_BIND_ADDRESS", "  ")
    assert parse_args([]).bind_address == "0.0.0.0"


def test_default_bind_answers_on_loopback(monkeypatch):
    monkeypatch.delenv("GRAPPA_BIND_ADDRESS", raising=False)
    port = free_port()
    metrics.serve(parse_args([]).bind_address, port)
    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    assert "grappa_operator_" in body

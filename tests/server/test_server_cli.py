"""``parley-cli serve``'s checks, all made before any model loads: where it may listen,
the API key, the port, aiohttp being installed."""

from __future__ import annotations

import importlib.util
import socket
import threading
import time

import pytest

from engine.cli.main import build_parser, main
from engine.errors import ConfigError, MissingDependencyError, ParleyError
from engine.server import require_aiohttp
from engine.cli.serve import settings_from_args
from engine.server.runner import ServerThread
from engine.server.server_settings import ServerSettings
from tests.support.cli import run_cli
from tests.support.server import free_port


@pytest.mark.parametrize("host", ["127.0.0.2", "0.0.0.0", "::", "192.168.1.10", "example.org"])
def test_a_host_other_machines_reach_needs_an_api_key(host):
    with pytest.raises(ConfigError, match="--api-key KEY or the environment variable PARLEY_API_KEY"):
        ServerSettings(host=host).check()
    ServerSettings(host=host, api_key="k3y-0f-tw3nty-chars-OK", insecure_plaintext=True).check()


@pytest.mark.parametrize("host", ["127.0.0.1", "::1", "localhost"])
def test_loopback_needs_no_key(host):
    ServerSettings(host=host).check()


@pytest.mark.parametrize(("field", "value", "flag"), [
    ("port", 70000, "--port"), ("num_pipelines", 0, "--num-pipelines"),
    ("max_message_bytes", 10, "--max-message-bytes"), ("max_buffer_s", 0.0, "--max-buffer-s"),
    ("max_events_per_s", float("nan"), "--max-events-per-s"), ("api_key", "  ", "API key"),
])
def test_bad_settings_name_their_flag(field, value, flag):
    with pytest.raises(ConfigError, match=flag):
        ServerSettings(**{field: value}).check()


def test_the_key_is_not_in_the_settings_repr():
    assert "s3cret" not in repr(ServerSettings(api_key="s3cret"))


def test_flags_and_the_environment_make_the_settings():
    args = build_parser().parse_args(["serve", "--host", "0.0.0.0", "--port", "9000",
                                      "--num-pipelines", "3", "--allow-origin", "http://a.example",
                                      "--allow-origin", "http://b.example", "--max-buffer-s", "5"])
    settings = settings_from_args(args, {"PARLEY_API_KEY": "from-env"})
    assert (settings.host, settings.port, settings.num_pipelines) == ("0.0.0.0", 9000, 3)
    assert settings.allow_origins == ("http://a.example", "http://b.example")
    assert settings.api_key == "from-env" and settings.max_buffer_s == 5.0
    args = build_parser().parse_args(["serve", "--api-key", "from-flag"])
    assert settings_from_args(args, {"PARLEY_API_KEY": "from-env"}).api_key == "from-flag"
    assert settings_from_args(build_parser().parse_args(["serve"]), {}).api_key is None


def test_non_loopback_without_key_exits_2_before_loading_anything():
    start = time.monotonic()
    result = run_cli("serve", "--host", "127.0.0.2", "--port", str(free_port()),
                     env={"PARLEY_API_KEY": ""}, timeout=60)
    assert result.returncode == 2, result.stderr
    assert "serving on 127.0.0.2 lets other machines connect" in result.stderr
    assert "models ready" not in result.stderr and "[llm" not in result.stderr
    assert time.monotonic() - start < 30


def test_a_port_in_use_is_an_error_before_loading_anything():
    with socket.create_server(("127.0.0.1", 0)) as busy:
        port = busy.getsockname()[1]
        result = run_cli("serve", "--port", str(port), timeout=60)
    assert result.returncode == 2, result.stderr
    assert f"cannot listen on 127.0.0.1 port {port}" in result.stderr
    assert "models ready" not in result.stderr


def test_units_other_than_the_pipelines_is_an_error(capsys):
    assert main(["serve", "--port", "0", "--num-pipelines", "2", "--units", "3"]) == 2
    assert "use --num-pipelines 3" in capsys.readouterr().err


def test_missing_aiohttp_says_how_to_install_it(monkeypatch, capsys):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "aiohttp" else real(name, *a))
    with pytest.raises(MissingDependencyError, match=r"pip install 'parley\[server\]'"):
        require_aiohttp()
    assert main(["serve", "--port", "0"]) == 2
    err = capsys.readouterr().err
    assert "pip install 'parley[server]'" in err and "models ready" not in err


def test_server_thread_on_a_busy_port_raises_and_leaves_no_thread():
    before = set(threading.enumerate())
    with socket.create_server(("127.0.0.1", 0)) as busy:
        port = busy.getsockname()[1]
        server = ServerThread(None, ServerSettings(port=port))  # fails before it needs an engine
        with pytest.raises(ParleyError, match=f"cannot listen on 127.0.0.1 port {port}"):
            server.start()
    assert server.stop() and set(threading.enumerate()) - before == set()

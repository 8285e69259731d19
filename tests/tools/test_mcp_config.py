"""``tools.mcp_servers``: [[tools.mcp_servers]] tables in the config file, the same list as
JSON in a flag or a saved setting, each fault a ConfigError naming the server and key."""

from __future__ import annotations

import json

import pytest

from engine.config import EngineConfig, load_config
from engine.errors import ConfigError
from engine.config_mcp import McpServerSpec, parse_servers, resolve

CONFIG = '''
[tools]
trusted = "delete_note"

[[tools.mcp_servers]]
name = "notes"
command = "uvx"
args = ["notes-mcp", "--root", "~/Notes"]
env = { NOTES_TOKEN = "${NOTES_TOKEN}" }

[[tools.mcp_servers]]
name = "home"
url = "http://127.0.0.1:8123/mcp"
headers = { Authorization = "Bearer ${HOME_TOKEN}" }
'''


def test_the_config_files_tables_become_the_servers(tmp_path):
    path = tmp_path / "parley.toml"
    path.write_text(CONFIG, "utf-8")
    config = load_config(path)
    assert parse_servers(config.tools.mcp_servers) == (
        McpServerSpec("notes", command="uvx", args=("notes-mcp", "--root", "~/Notes"),
                      env=(("NOTES_TOKEN", "${NOTES_TOKEN}"),)),
        McpServerSpec("home", url="http://127.0.0.1:8123/mcp",
                      headers=(("Authorization", "Bearer ${HOME_TOKEN}"),)))
    # The flat form (a flag, a saved setting) is JSON text, and reads back the same.
    flat = config.flat()["tools.mcp_servers"]
    assert json.loads(flat)[1] == {"name": "home", "url": "http://127.0.0.1:8123/mcp",
                                   "headers": {"Authorization": "Bearer ${HOME_TOKEN}"}}
    assert EngineConfig().with_overrides({"tools.mcp_servers": flat}).tools.mcp_servers == flat
    assert EngineConfig().tools.mcp_servers == ""


@pytest.mark.parametrize("servers, fragment", [
    ([{"command": "x"}], "'tools.mcp_servers[0].name' must be 1 to 32 letters"),
    ([{"name": "a b", "command": "x"}], "must be 1 to 32 letters, digits, - or _; got 'a b'"),
    ([{"name": "a"}], "'tools.mcp_servers[0] (a)' needs exactly one of command"),
    ([{"name": "a", "command": "x", "url": "http://h/mcp"}], "needs exactly one of command"),
    ([{"name": "a", "url": "ftp://h"}], "'tools.mcp_servers[0] (a).url' must be an http:// or https://"),
    ([{"name": "a", "command": "x", "args": "-v"}], "'tools.mcp_servers[0] (a).args' must be a list"),
    ([{"name": "a", "command": "x", "env": {"K": 1}}], ".env' must be a table of strings"),
    ([{"name": "a", "command": "x", "headers": {"K": "v"}}], ".headers' is for an HTTP server"),
    ([{"name": "a", "url": "http://h/mcp", "env": {}}], ".env' is for a stdio server"),
    ([{"name": "a", "command": "x", "colour": "red"}], "unknown key(s) colour; allowed: name, command"),
    ([{"name": "a", "command": "x"}, {"name": "a", "command": "y"}], "two servers are named 'a'"),
    ("{not json", "'tools.mcp_servers' must be a JSON list of server objects"),
    ({"name": "a"}, "'tools.mcp_servers' must be a list of servers"),
])
def test_a_bad_server_is_a_clear_error(servers, fragment):
    raw = servers if isinstance(servers, str) else json.dumps(servers)
    with pytest.raises(ConfigError) as info:
        EngineConfig().with_overrides({"tools.mcp_servers": raw})
    assert fragment in str(info.value)


def test_secrets_are_read_from_the_environment_when_connecting():
    spec = parse_servers([{"name": "home", "url": "https://h/mcp",
                           "headers": {"Authorization": "Bearer ${HOME_TOKEN}", "Accept-Language": "en"}}])[0]
    env, headers = resolve(spec, {"HOME_TOKEN": "abc"})
    assert env == {} and headers == {"Authorization": "Bearer abc", "Accept-Language": "en"}
    with pytest.raises(ConfigError, match=r"MCP server 'home': headers\.Authorization needs the "
                                          r"environment variable HOME_TOKEN, which is not set"):
        resolve(spec, {})

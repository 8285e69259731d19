"""The user module loader: each fault is a ToolModuleError naming the file and what is
wrong (never a traceback); a good module's tools are described and callable; in the
worker process the same errors come back, and a call's failure or timeout is its own."""

from __future__ import annotations

import pytest

from engine.tools.user_module import ToolModuleError, load_user_module
from engine.tools.worker import ToolRaised, ToolTimeout, UserToolWorker

GOOD = '''
TOOLS = [{"name": "add", "description": "Add two numbers.", "side_effects": False,
          "parameters": {"type": "object", "properties": {"a": {"type": "number"},
                                                          "b": {"type": "number"}}}},
         {"type": "function", "function": {"name": "launch", "description": "Launch it."},
          "side_effects": True}]

def add(a, b):
    return a + b

def launch():
    import time
    time.sleep(60)
'''


def write(tmp_path, text: str, name: str = "tools_mod.py"):
    path = tmp_path / name
    path.write_text(text, "utf-8")
    return path


def test_a_good_module_is_described_and_its_functions_found(tmp_path):
    tools, functions = load_user_module(str(write(tmp_path, GOOD)))
    assert [(t.name, t.side_effects) for t in tools] == [("add", False), ("launch", True)]
    assert tools[0].parameters["properties"]["a"] == {"type": "number"}
    assert tools[1].parameters == {"type": "object", "properties": {}}
    assert functions["add"](a=2, b=3) == 5


@pytest.mark.parametrize("text, fault", [
    ("TOOLS = [\n  {'name': 'x'\n", "line 2: syntax error"),
    ("import not_a_module_anywhere_42\n", "raised ModuleNotFoundError"),
    ("raise ValueError('bad config')\n", "raised ValueError: bad config"),
    ("X = 1\n", "has no TOOLS list"),
    ("TOOLS = {'name': 'x'}\n", "TOOLS must be a non-empty list"),
    ("TOOLS = []\n", "TOOLS must be a non-empty list"),
    ("TOOLS = ['x']\n", "TOOLS[0] must be a dict"),
    ("TOOLS = [{'description': 'no name'}]\n", "TOOLS[0]: 'name' must be a function name"),
    ("TOOLS = [{'name': 'two words'}]\n", "'name' must be a function name"),
    ("TOOLS = [{'name': 'f', 'parameters': {'type': 'array'}}]\ndef f(): pass\n",
     "TOOLS[0] (f): 'parameters' must be a JSON schema of type object"),
    ("TOOLS = [{'name': 'f', 'side_effects': 'yes'}]\ndef f(): pass\n",
     "'side_effects' must be true or false"),
    ("TOOLS = [{'name': 'f', 'descripton': 'typo'}]\ndef f(): pass\n", "unknown keys descripton"),
    ("TOOLS = [{'name': 'f'}, {'name': 'f'}]\ndef f(): pass\n", "TOOLS[1] repeats the name 'f'"),
    ("TOOLS = [{'name': 'missing'}]\n",
     "TOOLS[0] describes 'missing', but the module has no function missing()"),
    ("TOOLS = [{'name': 'f'}]\nf = 3\n", "has no function f()"),
])
def test_each_fault_names_the_file_and_what_is_wrong(tmp_path, text, fault):
    path = write(tmp_path, text)
    with pytest.raises(ToolModuleError) as raised:
        load_user_module(str(path))
    message = str(raised.value)
    assert message.startswith("tools.user_module: ") and fault in message, message
    assert "Traceback" not in message
    if "no TOOLS" in fault or "syntax" in fault or "raised" in fault:
        assert str(path) in message


def test_a_missing_file_or_module_is_named(tmp_path):
    with pytest.raises(ToolModuleError, match=r"the file .*nowhere\.py does not exist"):
        load_user_module(str(tmp_path / "nowhere.py"))
    with pytest.raises(ToolModuleError, match="there is no module named 'no_such_tools_module'"):
        load_user_module("no_such_tools_module")


def test_a_module_name_on_the_path_loads(tmp_path, monkeypatch):
    write(tmp_path, GOOD, "parley_test_named_tools.py")
    monkeypatch.syspath_prepend(str(tmp_path))
    tools, _ = load_user_module("parley_test_named_tools")
    assert [t.name for t in tools] == ["add", "launch"]


def test_the_worker_process_loads_calls_and_is_killed_on_a_timeout(tmp_path):
    bad = UserToolWorker(str(write(tmp_path, "X = 1\n", "bad.py")))
    with pytest.raises(ToolModuleError, match="has no TOOLS list"):
        bad.start()
    worker = UserToolWorker(str(write(tmp_path, GOOD)))
    try:
        assert [t.name for t in worker.start()] == ["add", "launch"]
        assert worker.call("add", '{"a": 2, "b": 40}', 10) == "42"
        with pytest.raises(ToolRaised, match="TypeError"):
            worker.call("add", '{"a": 2}', 10)
        with pytest.raises(ToolTimeout, match=r"launch took more than 0\.5 s and was stopped"):
            worker.call("launch", "{}", 0.5)
        assert worker.call("add", '{"a": 1, "b": 1}', 10) == "2"  # a fresh process
    finally:
        worker.close()

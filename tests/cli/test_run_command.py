"""``engine.errors.run_command``: the one exit block of parley-cli and its bench tools."""

import pytest

from engine.errors import ConfigError, NoSpeechError, ParleyError, run_command


def _raise(exc: BaseException):
    def command() -> int:
        raise exc

    return command


def test_the_command_status_passes_through(capsys):
    assert run_command(lambda: 0) == 0 and run_command(lambda: 1) == 1
    assert capsys.readouterr().err == ""


def test_a_parley_error_is_one_line_on_stderr_and_its_exit_code(capsys):
    assert run_command(_raise(ConfigError("'stt.device' must be a string"))) == 2
    assert capsys.readouterr().err == "parley-cli: error: 'stt.device' must be a string\n"

    class Tired(ParleyError):
        exit_code = 5

    assert run_command(_raise(Tired("no")), prog="bench") == 5
    assert capsys.readouterr().err == "bench: error: no\n"


def test_no_speech_is_a_result_not_an_error(capsys):
    assert run_command(_raise(NoSpeechError("no speech in x.wav"))) == 3
    assert capsys.readouterr().err == "parley-cli: no speech in x.wav\n"


def test_ctrl_c_exits_130(capsys):
    assert run_command(_raise(KeyboardInterrupt())) == 130
    assert capsys.readouterr().err == "parley-cli: interrupted\n"


def test_a_bug_keeps_its_traceback():
    with pytest.raises(ZeroDivisionError):
        run_command(lambda: 1 // 0)

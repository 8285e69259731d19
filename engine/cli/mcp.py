"""``parley-cli mcp``: Parley as an MCP server over stdin/stdout.

An agent (an editor's, a desktop assistant's) starts it as a subprocess and calls its
tools: ``speak`` says a text on this machine's speaker, ``listen`` returns the user's next
spoken turn, ``ask`` does both (``engine/mcp_server/``). The models load first; then the
protocol runs on stdin/stdout, and everything else (progress, notes, logs) goes to
stderr. ``--input FILE`` puts a recording in place of the microphone (played each time a
tool listens) and ``--output WAV`` records what is spoken instead of playing it, paced
like a speaker: together they run the server with no sound card (the tests do).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

AddConfigFlags = Callable[[argparse.ArgumentParser], None]

_HELP = ("serve Parley's voice to an MCP client over stdin/stdout: the tools speak, listen "
         "and ask")


def add_mcp_parser(sub, add_config_flags: AddConfigFlags) -> None:
    """``parley-cli mcp`` in the command line's subcommands."""
    parser = sub.add_parser("mcp", help=_HELP, description=_HELP + ". Logs go to stderr.")
    parser.add_argument("--input", metavar="FILE",
                        help="a recording (wav, flac, mp3, ogg) in place of the microphone, "
                             "played from its start each time a tool listens")
    parser.add_argument("--output", metavar="WAV",
                        help="write what is spoken to this WAV file (paced like a speaker, "
                             "written when the server ends) instead of playing it")
    add_config_flags(parser)


def run_mcp(args: argparse.Namespace, config) -> int:
    """Load the engine, serve MCP on stdin/stdout until the client closes it; 0, or 1
    when threads did not stop."""
    from engine.audio.base import AudioSink, AudioSource
    from engine.cli.converse import check_output, prepare_engine
    from engine.mcp_server.microphone import RecordingMicrophone
    from engine.mcp_server.tools import build_server
    from engine.mcp_server.voice import Voice
    from engine.recording import trailing_silence_s

    check_output(args.output)  # bad paths fail before any model loads
    recording = None
    if args.input:
        from engine.audio.decode import load_audio

        recording = load_audio(args.input)
    engine = prepare_engine(config)
    stuck: list[str] = []
    try:
        source: AudioSource
        on_listen = None
        if recording is not None:
            microphone = RecordingMicrophone(recording, trailing_silence_s(config))
            source, on_listen = microphone, microphone.play
        else:
            from engine.audio.mic import MicSource

            source = MicSource(config.audio.input_device, config.audio.capture_buffer_s)
        sink: AudioSink
        if args.output:
            from engine.audio.file_sink import FileSink

            sink = FileSink(args.output, realtime=True)
        else:
            from engine.audio.speaker import SpeakerSink

            sink = SpeakerSink(config.audio.output_device)
        voice = Voice(engine, source, sink, on_listen=on_listen)
        try:
            print("parley-cli mcp: serving the tools speak, listen and ask on stdin/stdout",
                  file=sys.stderr, flush=True)
            build_server(voice).run("stdio")
        finally:
            stuck = voice.close()
    finally:
        engine.close()
    if stuck:
        print(f"parley-cli mcp: threads did not stop: {', '.join(stuck)}", file=sys.stderr)
    if args.output:
        print(f"parley-cli mcp: what was spoken is in {args.output}", file=sys.stderr)
    return 1 if stuck else 0

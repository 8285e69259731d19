"""Audio in and out: microphone and speaker (sounddevice), file source and sink.

Importing this package loads numpy only; sounddevice, soundfile and soxr are imported
when a device is listed or opened, or a file is decoded or written.
"""

from engine.audio.base import PIPELINE_RATE, AudioBlock, AudioSink, AudioSource, SourceWrapper
from engine.audio.buffer import DropOldestBuffer, PlaybackQueue, TurnPlayback
from engine.audio.file_sink import FileSink
from engine.audio.file_source import FileSource
from engine.audio.mic import MicSource
from engine.audio.sd_devices import AudioDevice, DeviceKind, list_audio_devices, resolve_device
from engine.audio.speaker import SpeakerSink

__all__ = [
    "PIPELINE_RATE", "AudioBlock", "AudioSink", "AudioSource", "AudioDevice", "DeviceKind",
    "SourceWrapper",
    "DropOldestBuffer", "PlaybackQueue", "TurnPlayback", "FileSink", "FileSource",
    "MicSource", "SpeakerSink", "list_audio_devices", "resolve_device",
]

"""Plain helpers the tests share, one module per subject; no fixtures (those are in the
``conftest.py`` files).

- ``paths``: the checkout and its recordings.
- ``audio``: tones, WAV files, measures; ``sound_devices``: the devices present, skip markers.
- ``fake_sound``: a fake ``sounddevice`` with faults; ``faults``: models and loads that fail.
- ``threads``: waiting for a condition, threads left behind.
- ``transcripts``: text made comparable; ``cli``: ``parley-cli`` in a fresh interpreter.
- ``events``, ``history``, ``sources``, ``device_check``: engine events, stored turns, a
  silent source, the device check's models.
- ``llm``, ``mlx``, ``stt``, ``tts``: backend helpers and tiny random models.
- ``stage_harness``: one stage run without a pipeline (``stage_context``, ``run_stage``: its
  outputs and events), as pipecat's ``run_test``.
- ``server``, ``remote``, ``hub``: the realtime server's clients, OpenAI-compatible servers
  and a fault proxy, a local model hub.
- ``gui``: device lists, snapshots and a stall meter for the GUI tests.
"""

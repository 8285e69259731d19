"""Fault injection for the tests, and only for them: nothing here is part of the product.

- ``Faulty*`` wrap a really loaded model: the Nth call of its work method raises (a stage
  that fails on turn N), everything else is the real model's.
- ``FaultyRegistry`` is a ModelRegistry whose loader fails for one stage (a load that
  fails: an error, or a device out of memory).

A sound card that fails is ``tests.support.fake_sound``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator

import numpy as np

from engine.backends.base import no_progress
from engine.models.model_registry import ModelRegistry


def injected(text: str = "injected fault") -> RuntimeError:
    return RuntimeError(text)


def cuda_oom() -> BaseException:
    """What torch raises when CUDA memory runs out (the real class, on any build)."""
    import torch

    return torch.cuda.OutOfMemoryError(
        "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 23.55 GiB")


def onnx_oom() -> RuntimeError:
    """ONNX Runtime's wording when an allocation fails."""
    return RuntimeError("[ONNXRuntimeError] : 6 : RUNTIME_EXCEPTION : Non-zero status code returned "
                        "while running Conv node. Failed to allocate memory for requested buffer of "
                        "size 1073741824")


def ctranslate2_oom() -> RuntimeError:
    """CTranslate2's wording when CUDA memory runs out."""
    return RuntimeError("CUDA failed with error out of memory")


class _Counter:
    def __init__(self, on_calls: set[int], exc: Callable[[], BaseException]) -> None:
        self.on_calls = on_calls
        self.exc = exc
        self.calls = 0
        self.raised = 0
        self._lock = threading.Lock()

    def hit(self) -> bool:
        with self._lock:
            self.calls += 1
            fail = self.calls in self.on_calls
            self.raised += fail
            return fail


class FaultyModel:
    """A loaded STT or TTS model whose ``method`` raises on the calls numbered ``on_calls``
    (1-based); a generator method raises before its first item."""

    def __init__(self, model, method: str, exc: Callable[[], BaseException],
                 on_calls: set[int] | int = 1) -> None:
        self._model = model
        self._method = method
        self.faults = _Counter({on_calls} if isinstance(on_calls, int) else set(on_calls), exc)

    def __getattr__(self, name: str):
        attr = getattr(self._model, name)
        if name != self._method:
            return attr
        faults = self.faults

        def call(*args, **kwargs):
            if faults.hit():
                raise faults.exc()
            return attr(*args, **kwargs)

        return call


class FaultyLlm:
    """A loaded LLM whose sessions' ``generate`` raises on the calls numbered ``on_calls``,
    after ``after_steps`` tokens of the reply (a failure mid-reply)."""

    def __init__(self, model, exc: Callable[[], BaseException], on_calls: set[int] | int = 1,
                 after_steps: int = 2) -> None:
        self._model = model
        self.after_steps = after_steps
        self.faults = _Counter({on_calls} if isinstance(on_calls, int) else set(on_calls), exc)

    def __getattr__(self, name: str):
        return getattr(self._model, name)

    def new_session(self):
        return _FaultySession(self._model.new_session(), self)


class _FaultySession:
    def __init__(self, session, owner: FaultyLlm) -> None:
        self._session = session
        self._owner = owner

    def __getattr__(self, name: str):
        return getattr(self._session, name)

    def generate(self, messages, options, should_stop) -> Iterator:
        fail = self._owner.faults.hit()
        for n, step in enumerate(self._session.generate(messages, options, should_stop)):
            if fail and n == self._owner.after_steps:
                raise self._owner.faults.exc()
            yield step
        if fail:
            raise self._owner.faults.exc()


class FaultyVad:
    """A loaded VAD whose streams raise on the ``on_frame``-th frame scored (1-based,
    counted over all streams) and on the ``frames`` after it."""

    def __init__(self, model, exc: Callable[[], BaseException], on_frame: int, frames: int = 1) -> None:
        self._model = model
        self.faults = _Counter(set(range(on_frame, on_frame + frames)), exc)

    def __getattr__(self, name: str):
        return getattr(self._model, name)

    def new_stream(self):
        return _FaultyVadStream(self._model.new_stream(), self.faults)


class _FaultyVadStream:
    def __init__(self, stream, faults: _Counter) -> None:
        self._stream = stream
        self._faults = faults

    def __getattr__(self, name: str):
        return getattr(self._stream, name)

    def speech_probability(self, frame: np.ndarray) -> float:
        if self._faults.hit():
            raise self._faults.exc()
        return self._stream.speech_probability(frame)


class FaultyRegistry(ModelRegistry):
    """A ModelRegistry whose loader raises ``exc()`` for ``stage`` (the other stages load
    for real): the registry's own bookkeeping runs as for any failed load."""

    def __init__(self, stage: str, exc: Callable[[], BaseException]) -> None:
        super().__init__()
        self.stage = stage
        self.exc = exc
        self.attempts = 0

    def acquire(self, placement, options, progress=no_progress, loader=None):
        if placement.stage != self.stage:
            return super().acquire(placement, options, progress, loader)

        def fail(_request, _progress):
            self.attempts += 1
            raise self.exc()

        return super().acquire(placement, options, progress, fail)

"""The measured pieces of the calibration: real runtimes on real-width layers, random weights.

Two builders and three timers, none of which needs a download or torch:

- ``write_ct2_whisper``: a CTranslate2 Whisper (``model.bin``, int8) written straight
  from a hub ``config.json`` with numpy random int8 weights, any number of layers: the
  file format and shapes ``TransformersConverter(...).convert(quantization="int8")`` gives
  for a random transformers Whisper, without torch or the float model (large-v3-turbo
  that way took ~42 s here: build 8 s, save 9 s, convert 25 s; one layer of it written
  directly takes ~1 s, which the calibration's budget needs).
- ``time_whisper``: one STT call as ``whisper_window`` makes it: the features of the
  window encoded, the encoder output completed to Whisper's 1500 positions, ``tokens``
  greedy tokens decoded.
- ``matmul_times``: onnxruntime's ``MatMulNBits`` (int4, block 32, accuracy level 4: what
  onnxruntime-genai's builder writes for the CPU, read from the bundled SmolLM2's
  conversion) on one decoder layer's weight shapes and the output head's, for one token
  (decode) and for a prompt (prefill).
- ``time_piper``: the bundled Piper voice speaking a first clause.
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from engine.errors import ModelError

ENCODER_POSITIONS = 1500  # Whisper's encoder output for 30 s (3000 frames, stride-2 conv)
INT4_BLOCK = 32
#: The tokens a Whisper prompt and stop need, whatever the vocabulary.
_SPECIALS = ("<|endoftext|>", "<|startoftranscript|>", "<|notimestamps|>")


def median_time(call: Callable[[], object], repeats: int, *, warm: bool = True) -> float:
    """The median wall time of ``repeats`` calls of ``call``, after one unmeasured call
    (the first pays allocations and thread start-up) unless ``warm`` is false."""
    if warm:
        call()
    times = []
    for _ in range(max(1, repeats)):
        started = time.perf_counter()
        call()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


# ------------------------------------------------------------------------- Whisper
@dataclass(frozen=True, slots=True)
class WhisperShape:
    """What the cost of a Whisper depends on, read from its hub config."""

    d_model: int
    encoder_layers: int
    encoder_heads: int
    encoder_ffn: int
    decoder_layers: int
    decoder_heads: int
    decoder_ffn: int
    mels: int
    vocab: int
    target_positions: int

    @classmethod
    def of(cls, config: dict) -> WhisperShape:
        """ModelError naming the missing key when ``config`` is not a Whisper config."""
        try:
            return cls(int(config["d_model"]), int(config["encoder_layers"]),
                       int(config["encoder_attention_heads"]), int(config["encoder_ffn_dim"]),
                       int(config["decoder_layers"]), int(config["decoder_attention_heads"]),
                       int(config["decoder_ffn_dim"]), int(config["num_mel_bins"]),
                       int(config["vocab_size"]), int(config["max_target_positions"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise ModelError(f"not a Whisper config: missing or bad {exc}") from None

    def encoder_split(self, frames: int) -> tuple[float, float]:
        """Multiply-adds of the encoder's front end (two convolutions) and of one layer,
        for ``frames`` mel frames."""
        d, positions = self.d_model, frames // 2
        front = frames * self.mels * 3 * d + positions * d * 3 * d
        layer = positions * (4 * d * d + 2 * d * self.encoder_ffn) + 2 * positions * positions * d
        return float(front), float(layer)

    def decoder_split(self, tokens: int) -> tuple[float, float]:
        """Multiply-adds of the decoder's fixed part (the output projection per token) and
        of one layer (the cross-attention keys and values of 1500 positions once, then
        per token its projections, its attention over them and its feed-forward)."""
        d = self.d_model
        fixed = tokens * d * self.vocab
        layer = (2 * ENCODER_POSITIONS * d * d
                 + tokens * (6 * d * d + 2 * d * self.decoder_ffn + 2 * ENCODER_POSITIONS * d))
        return float(fixed), float(layer)


def write_ct2_whisper(folder: Path, config: dict, *, encoder_layers: int | None = None,
                      decoder_layers: int | None = None, tokenizer: Path | None = None,
                      seed: int = 0) -> Path:
    """A CTranslate2 Whisper of ``config``'s sizes with random int8 weights in ``folder``
    (written once: a folder holding ``model.bin`` is reused). ``encoder_layers`` and
    ``decoder_layers`` default to the config's. ``tokenizer``: a ``tokenizer.json`` copied
    beside it (faster-whisper reads one from the folder). No language tokens are declared
    (the model reads as English-only): a random model has no language to detect, and a
    call told its language costs the same."""
    if (folder / "model.bin").is_file():
        return folder
    import shutil

    from ctranslate2.specs import whisper_spec

    shape = WhisperShape.of(config)
    enc = shape.encoder_layers if encoder_layers is None else encoder_layers
    dec = shape.decoder_layers if decoder_layers is None else decoder_layers
    d, rng = shape.d_model, np.random.default_rng(seed)

    def rand(*dims: int) -> np.ndarray:
        return (rng.standard_normal(dims, dtype=np.float32) * 0.02).astype(np.float32)

    def weight(spec, *dims: int) -> None:
        # Drawn as int8 with their scales, as spec.optimize("int8") would leave them:
        # quantizing float weights in numpy took most of a minute for large-v3-turbo.
        spec.weight = rng.integers(-127, 128, dims, dtype=np.int8)
        spec.weight_scale = np.full(dims[0], 127 / 0.05, np.float32)

    def norm(spec) -> None:
        spec.gamma, spec.beta = np.ones(d, np.float32), np.zeros(d, np.float32)

    def linear(spec, rows: int, cols: int) -> None:
        weight(spec, rows, cols)
        spec.bias = np.zeros(rows, np.float32)

    def ffn(spec, inner: int) -> None:
        linear(spec.linear_0, inner, d)
        linear(spec.linear_1, d, inner)
        norm(spec.layer_norm)

    spec = whisper_spec.WhisperSpec(enc, shape.encoder_heads, dec, shape.decoder_heads)
    # CTranslate2's spec attributes are declared with placeholder types: Any here.
    encoder: Any = spec.encoder
    weight(encoder.conv1, d, shape.mels, 3)
    weight(encoder.conv2, d, d, 3)
    encoder.conv1.bias, encoder.conv2.bias = np.zeros(d, np.float32), np.zeros(d, np.float32)
    encoder.position_encodings.encodings = rand(ENCODER_POSITIONS, d)
    norm(encoder.layer_norm)
    for layer in encoder.layer:
        linear(layer.self_attention.linear[0], 3 * d, d)
        linear(layer.self_attention.linear[1], d, d)
        norm(layer.self_attention.layer_norm)
        ffn(layer.ffn, shape.encoder_ffn)
    decoder: Any = spec.decoder
    weight(decoder.embeddings, shape.vocab, d)
    decoder.position_encodings.encodings = rand(shape.target_positions, d)
    norm(decoder.layer_norm)
    for layer in decoder.layer:
        linear(layer.self_attention.linear[0], 3 * d, d)
        linear(layer.self_attention.linear[1], d, d)
        norm(layer.self_attention.layer_norm)
        linear(layer.attention.linear[0], d, d)
        linear(layer.attention.linear[1], 2 * d, d)
        linear(layer.attention.linear[2], d, d)
        norm(layer.attention.layer_norm)
        ffn(layer.ffn, shape.decoder_ffn)
    decoder.projection.weight = decoder.embeddings.weight  # tied, as in Whisper
    decoder.projection.weight_scale = decoder.embeddings.weight_scale
    spec.register_vocabulary(_vocabulary(shape.vocab, tokenizer))
    settings: Any = spec.config
    settings.suppress_ids, settings.suppress_ids_begin, settings.lang_ids = [], [], []
    settings.alignment_heads = [(max(0, dec - 1), 0)]
    spec.validate()  # no spec.optimize: the weights are int8 already
    temp = folder.with_name(folder.name + ".partial")
    shutil.rmtree(temp, ignore_errors=True)
    temp.mkdir(parents=True)
    spec.save(str(temp))
    if tokenizer is not None:
        shutil.copy(tokenizer, temp / "tokenizer.json")
    # faster-whisper takes the mel count from here (128 for large-v3 and its turbo).
    (temp / "preprocessor_config.json").write_text(json.dumps(
        {"feature_size": shape.mels, "sampling_rate": 16000, "hop_length": 160,
         "chunk_length": 30, "n_fft": 400}), encoding="utf-8")
    shutil.rmtree(folder, ignore_errors=True)
    temp.rename(folder)
    return folder


def _vocabulary(size: int, tokenizer: Path | None) -> list[str]:
    """``size`` tokens: the tokenizer's own, in id order, then timestamp-like fillers (as
    the converter completes a vocabulary the model is wider than)."""
    tokens: list[str] = []
    if tokenizer is not None:
        data = json.loads(tokenizer.read_text(encoding="utf-8"))
        by_id = {i: t for t, i in data["model"]["vocab"].items()}
        by_id.update({a["id"]: a["content"] for a in data.get("added_tokens", [])})
        tokens = [by_id.get(i, f"<|unused{i}|>") for i in range(min(size, max(by_id) + 1))]
    missing = [t for t in _SPECIALS if t not in tokens]
    tokens += missing + [f"<|{i * 0.02:.2f}|>" for i in range(size - len(tokens) - len(missing))]
    return tokens[:size]


def time_whisper(folder: Path, *, frames: tuple[int, ...], tokens: int, repeats: int = 1,
                 device: str = "cpu", compute_type: str = "int8",
                 threads: int = 0) -> tuple[float, ...]:
    """One STT call's parts on the CTranslate2 Whisper in ``folder``: the encode seconds of
    each entry of ``frames`` (mel frames), then the decode seconds of ``tokens`` greedy
    tokens over Whisper's 1500 encoder positions (``whisper_window`` completes a short
    window's output with encoded silence, so the decoder's cost is the same for any window).
    Only the first window gets an unmeasured warm-up call: the later ones find the
    encoder's threads and buffers up."""
    import ctranslate2

    model = ctranslate2.models.Whisper(str(folder), device=device, compute_type=compute_type,
                                       intra_threads=threads, inter_threads=1)
    rng = np.random.default_rng(1)
    encoded: list[np.ndarray] = []
    times = []
    for number, count in enumerate(frames):
        features = ctranslate2.StorageView.from_array(
            rng.standard_normal((1, model.n_mels, count), dtype=np.float32))

        def encode(features=features) -> None:
            encoded[:] = [np.asarray(model.encode(features, to_cpu=True))]

        times.append(median_time(encode, repeats, warm=number == 0))
    output = encoded[0]
    if output.shape[1] < ENCODER_POSITIONS:
        pad = np.zeros((1, ENCODER_POSITIONS - output.shape[1], output.shape[2]), output.dtype)
        output = np.concatenate([output, pad], axis=1)
    full = ctranslate2.StorageView.from_array(np.ascontiguousarray(output[:, :ENCODER_POSITIONS]))
    prompt = [list(_SPECIALS[1:])]  # no language token: random weights need none

    def decode() -> None:
        model.generate(full, prompt, beam_size=1, max_length=tokens + len(prompt[0]),
                       suppress_blank=False, suppress_tokens=[], return_scores=False)

    times.append(median_time(decode, repeats))
    return tuple(times)


# ----------------------------------------------------------------------------- LLM
@dataclass(frozen=True, slots=True)
class DecoderShape:
    """What the cost of a decoder-only LM depends on, read from its hub config."""

    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int

    @classmethod
    def of(cls, config: dict) -> DecoderShape:
        """ModelError naming the missing key when ``config`` is not a decoder LM config."""
        try:
            hidden, heads = int(config["hidden_size"]), int(config["num_attention_heads"])
            return cls(hidden, int(config["num_hidden_layers"]), heads,
                       int(config.get("num_key_value_heads") or heads),
                       int(config.get("head_dim") or hidden // heads),
                       int(config["intermediate_size"]), int(config["vocab_size"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise ModelError(f"not a decoder LM config: missing or bad {exc}") from None

    def layer_matmuls(self) -> list[tuple[int, int]]:
        """(K, N) of each weight of one layer, as the builder lays them out (q, k and v in
        one ``qkv_proj``; gate and up apart)."""
        q, kv = self.heads * self.head_dim, self.kv_heads * self.head_dim
        return [(self.hidden, q + 2 * kv), (q, self.hidden), (self.hidden, self.intermediate),
                (self.hidden, self.intermediate), (self.intermediate, self.hidden)]


def _matmul_graph(shapes: list[tuple[int, int]], seed: int) -> bytes:
    """An ONNX graph of one int4 ``MatMulNBits`` per (K, N), each on its own input."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    nodes, inputs, outputs, inits = [], [], [], []
    for i, (k, n) in enumerate(shapes):
        blocks = -(-k // INT4_BLOCK)
        weight = rng.integers(0, 256, (n, blocks, INT4_BLOCK // 2), dtype=np.uint8)
        scales = (rng.random(n * blocks, dtype=np.float32) * 0.01).astype(np.float32)
        inits += [numpy_helper.from_array(weight, f"w{i}"), numpy_helper.from_array(scales, f"s{i}")]
        inputs.append(helper.make_tensor_value_info(f"x{i}", TensorProto.FLOAT, ["m", k]))
        outputs.append(helper.make_tensor_value_info(f"y{i}", TensorProto.FLOAT, ["m", n]))
        nodes.append(helper.make_node("MatMulNBits", [f"x{i}", f"w{i}", f"s{i}"], [f"y{i}"],
                                      domain="com.microsoft", K=k, N=n, bits=4,
                                      block_size=INT4_BLOCK, accuracy_level=4))
    graph = helper.make_graph(nodes, "kernels", inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("com.microsoft", 1)])
    return model.SerializeToString()


def matmul_times(shapes: list[tuple[int, int]], rows: tuple[int, ...], *, repeats: int = 1,
                 threads: int = 0, seed: int = 0) -> dict[int, float]:
    """Seconds for all of ``shapes`` (int4 ``MatMulNBits``) on ``rows`` tokens at once,
    per entry of ``rows``."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    session = onnxruntime.InferenceSession(_matmul_graph(shapes, seed), sess_options=options,
                                           providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(seed + 1)
    times = {}
    for m in rows:
        feeds = {f"x{i}": rng.standard_normal((m, k), dtype=np.float32)
                 for i, (k, _n) in enumerate(shapes)}
        times[m] = median_time(lambda feeds=feeds: session.run(None, feeds), repeats)
    return times


def measure_bundled_llm(prompt_tokens: int, decode_tokens: int, threads: int, *,
                        turn_tokens: int) -> tuple[DecoderShape, float, float, float] | None:
    """(its shape, then ``time_onnx_genai``'s three figures) of the bundled SmolLM2-135M on
    the onnx-genai backend's own decode loop; None when its conversion is not on this
    machine (converting takes ~45 s)."""
    from engine.backends.llm.onnx_convert import existing_conversion
    from engine.backends.llm.onnx_genai import bundled_model

    gguf = bundled_model()
    folder = existing_conversion(gguf) if gguf else None
    if folder is None:
        return None
    return onnx_decoder_shape(folder), *time_onnx_genai(folder, prompt_tokens, decode_tokens,
                                                          threads, turn_tokens=turn_tokens)


def time_onnx_genai(folder: Path, prompt_tokens: int, decode_tokens: int, threads: int,
                    repeats: int = 1, *, turn_tokens: int = 16) -> tuple[float, float, float]:
    """(seconds to the first token of a ``prompt_tokens`` prompt on an empty cache, seconds
    per decoded token, seconds to the first token of ``turn_tokens`` new tokens on top of
    that prompt's cache) of the onnx-genai model in ``folder`` on the backend's own decode
    loop (the KV cache in and out of each call as the backend keeps it); medians of
    ``repeats``. The third is a later turn: the backend keeps the conversation's cache and
    prefills only the tokens a turn adds (``OnnxGenaiSession``)."""
    llm = _open_onnx_genai(folder, threads)
    rng = np.random.default_rng(2)
    ids = [int(i) for i in rng.integers(100, 40000, prompt_tokens)]
    turn = [int(i) for i in rng.integers(100, 40000, max(1, turn_tokens))]
    llm.run(ids[:16], llm.decoder.empty_cache(), 0)  # warm-up
    firsts, steps, turns = [], [], []
    for _ in range(max(1, repeats)):
        started = time.perf_counter()
        logits, cache = llm.run(ids, llm.decoder.empty_cache(), 0)
        firsts.append(time.perf_counter() - started)
        # run() returns a new cache and leaves the one it was given as it was.
        started = time.perf_counter()
        llm.run(turn, cache, prompt_tokens)
        turns.append(time.perf_counter() - started)
        started = time.perf_counter()
        for step in range(decode_tokens):
            logits, cache = llm.run([int(np.argmax(logits))], cache, prompt_tokens + step)
        steps.append((time.perf_counter() - started) / decode_tokens)
    return statistics.median(firsts), statistics.median(steps), statistics.median(turns)


def _open_onnx_genai(folder: Path, threads: int):
    """The onnx-genai backend's model on ``folder``, its session sized as the backend's."""
    import onnxruntime

    from engine.backends.llm.chat_tokenizer import ChatTokenizer
    from engine.backends.llm.onnx_genai import Decoder, OnnxGenaiLlm

    decoder = Decoder.read(folder)
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    session = onnxruntime.InferenceSession(str(folder / decoder.filename), sess_options=options,
                                           providers=["CPUExecutionProvider"])
    return OnnxGenaiLlm(session, decoder, ChatTokenizer(folder), folder, "int4")


def onnx_decoder_shape(folder: Path) -> DecoderShape:
    """The shape of the onnx-genai decoder in ``folder``, read from its graph's
    ``MatMulNBits`` nodes and ``genai_config.json`` (no weights loaded)."""
    import onnx

    decoder = json.loads((folder / "genai_config.json").read_text(encoding="utf-8"))["model"]["decoder"]
    graph = onnx.load(str(folder / "model.onnx"), load_external_data=False).graph
    sizes = {node.name: {a.name: a.i for a in node.attribute if a.name in ("K", "N")}
             for node in graph.node if node.op_type == "MatMulNBits"}

    def size(part: str, key: str) -> int:
        return next(v[key] for name, v in sizes.items() if part in name)

    return DecoderShape(hidden=int(decoder["hidden_size"]), layers=int(decoder["num_hidden_layers"]),
                        heads=int(decoder["num_attention_heads"]),
                        kv_heads=int(decoder["num_key_value_heads"]),
                        head_dim=int(decoder["head_size"]),
                        intermediate=size("layers.0/mlp/down_proj", "K"),
                        vocab=size("lm_head", "N"))


# ----------------------------------------------------------------------------- TTS
def time_piper(onnx_path: Path, text: str, *, repeats: int = 2, threads: int = 1) -> float:
    """Seconds for the Piper voice at ``onnx_path`` to speak ``text`` (its first and only
    sentence: one call of its model)."""
    import onnxruntime
    from piper.config import PiperConfig, SynthesisConfig
    from piper.voice import PiperVoice

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    session = onnxruntime.InferenceSession(str(onnx_path), sess_options=options,
                                           providers=["CPUExecutionProvider"])
    config_path = Path(f"{onnx_path}.json")
    try:
        config = PiperConfig.from_dict(json.loads(config_path.read_text(encoding="utf-8")))
    except (OSError, ValueError) as exc:
        raise ModelError(f"cannot read the Piper voice config {config_path}: {exc}") from None
    voice = PiperVoice(session=session, config=config)
    synthesis = SynthesisConfig()
    return median_time(lambda: list(voice.synthesize(text, synthesis)), repeats)

"""``parley-cli bench llm-runtimes``: CPU LLM runtimes side by side on the bundled SmolLM2.

Each runtime runs in its own child process (so its peak RSS and its imports are its own),
one after another, for ``--rounds`` rounds in turn so a noisy moment of the machine falls
on all of them: Parley's ``transformers`` backend, Parley's ``onnx-genai`` backend (int4,
and int8 with ``--int8``), and CTranslate2's ``Generator`` (int8, converted from the same
safetensors folder; not a Parley backend, measured for the choice). Every child answers the
same prompt ``--runs`` times, greedy, with the same penalties, and reports its load time,
time to first token, decode rate, peak RSS and what it said; the parent prints the medians
and the size of each runtime's installed packages.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path

from engine.backends.base import GenerationOptions, LoadRequest

RUNTIMES = ("transformers", "onnx-genai", "ctranslate2")
_PACKAGES = {"transformers": ("torch", "transformers", "safetensors", "tokenizers"),
             "onnx-genai": ("onnxruntime-genai", "onnxruntime", "tokenizers"),
             "onnx-genai-int8": ("onnxruntime-genai", "onnxruntime", "tokenizers"),
             "ctranslate2": ("ctranslate2", "tokenizers")}
PROMPT = [{"role": "system", "content": "You are a helpful voice assistant. Keep answers short."},
          {"role": "user", "content": "And so my fellow Americans, ask not what your country can "
                                      "do for you, ask what you can do for your country."}]


def installed_bytes(packages: tuple[str, ...]) -> int:
    """The bytes on disk of the installed distributions named (missing ones count 0)."""
    total = 0
    for name in packages:
        try:
            files = metadata.distribution(name).files or []
        except metadata.PackageNotFoundError:
            continue
        for file in files:
            path = Path(str(file.locate()))
            if path.is_file():
                total += path.stat().st_size
    return total


def _options(tokens: int) -> GenerationOptions:
    return GenerationOptions(max_new_tokens=tokens, repetition_penalty=1.3, no_repeat_ngram_size=4)


def _parley_backend(name: str, dtype: str, runs: int, tokens: int) -> dict:
    """Parley's own backend ``name``: load, then ``runs`` fresh-session replies."""
    from engine.backends import BackendRegistry
    from engine.config import LlmConfig
    from engine.runtime.devices import CPU

    spec = BackendRegistry().get("llm", name)
    module = spec.import_module()
    started = time.perf_counter()
    llm = module.load(LoadRequest(spec.bundled_model() or "", CPU, dtype, LlmConfig()))
    load_s = time.perf_counter() - started
    llm.warmup()
    figures = []
    for _ in range(runs):
        session = llm.new_session()
        t0 = time.perf_counter()
        first, text, last = None, "", None
        for step in session.generate(PROMPT, _options(tokens), lambda: False):
            first = first or time.perf_counter() - t0
            text += step.text
            last = step
        figures.append({"ttft_s": first, "tokens_per_s": last.tokens_per_second if last else 0.0,
                        "tokens": last.tokens if last else 0, "text": text})
    return {"load_s": load_s, "runs": figures}


def _ctranslate2(runs: int, tokens: int) -> dict:
    """CTranslate2's Generator (int8) on the same safetensors folder, same prompt."""
    import ctranslate2

    from engine.backends.llm.chat_tokenizer import ChatTokenizer
    from engine.backends.llm.conversion_cache import cache_folder, write_once
    from engine.backends.llm.model_folder import resolve_model_folder
    from engine.backends.llm.transformers_lm import bundled_model

    source = resolve_model_folder(bundled_model() or "")
    target = cache_folder(f"{source.name}-ct2-int8-{ctranslate2.__version__}")
    if not (target / "model.bin").is_file():
        def convert(temp: Path) -> dict:
            ctranslate2.converters.TransformersConverter(str(source)).convert(
                str(temp), quantization="int8", force=True)
            return {"source": str(source)}

        write_once(target, convert)
    tokenizer = ChatTokenizer(source)
    ids = tokenizer.encode(tokenizer.apply_chat_template(PROMPT, add_generation_prompt=True))
    prompt = [tokenizer.convert_ids_to_tokens(i) for i in ids]
    end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    started = time.perf_counter()
    generator = ctranslate2.Generator(str(target), device="cpu", compute_type="int8")
    load_s = time.perf_counter() - started
    figures = []
    for _ in range(runs + 1):  # the first is the warm-up
        t0 = time.perf_counter()
        first, out = None, []
        for step in generator.generate_tokens(prompt, max_length=tokens, sampling_topk=1,
                                              repetition_penalty=1.3, no_repeat_ngram_size=4,
                                              end_token=[end] if end is not None else None):
            first = first or time.perf_counter()
            out.append(step.token_id)
        done = time.perf_counter()
        rate = (len(out) - 1) / (done - first) if first and len(out) > 1 else 0.0
        figures.append({"ttft_s": (first or done) - t0, "tokens_per_s": rate, "tokens": len(out),
                        "text": tokenizer.decode(out)})
    return {"load_s": load_s, "runs": figures[1:]}


def child(runtime: str, runs: int, tokens: int) -> dict:
    """Measure one runtime in this process."""
    import resource

    if runtime == "ctranslate2":
        doc = _ctranslate2(runs, tokens)
    elif runtime == "onnx-genai-int8":
        doc = _parley_backend("onnx-genai", "int8", runs, tokens)
    else:
        doc = _parley_backend(runtime, "auto", runs, tokens)
    scale = 1 if sys.platform == "darwin" else 1024  # ru_maxrss: bytes on macOS, KiB elsewhere
    doc["peak_rss_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale
    return doc


def _summary(name: str, docs: list[dict]) -> dict:
    runs = [r for d in docs for r in d["runs"]]
    return {"runtime": name,
            "ttft_ms_p50": round(1000 * statistics.median(r["ttft_s"] for r in runs), 1),
            "tokens_per_s_p50": round(statistics.median(r["tokens_per_s"] for r in runs), 1),
            "load_s_p50": round(statistics.median(d["load_s"] for d in docs), 2),
            "peak_rss_mib": round(max(d["peak_rss_bytes"] for d in docs) / 2**20),
            "installed_mib": round(installed_bytes(_PACKAGES[name]) / 2**20),
            "reply": runs[-1]["text"].strip()}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="parley-cli bench llm-runtimes",
                                     description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3, help="replies per runtime per round")
    parser.add_argument("--rounds", type=int, default=2, help="rounds, runtimes in turn")
    parser.add_argument("--tokens", type=int, default=40, help="new tokens per reply")
    parser.add_argument("--int8", action="store_true", help="also onnx-genai with int8 weights")
    parser.add_argument("--json", type=Path, help="write the figures here")
    parser.add_argument("--child", choices=(*RUNTIMES, "onnx-genai-int8"), help=argparse.SUPPRESS)
    return parser


def main(argv: list[str]) -> int:
    """``parley-cli bench llm-runtimes ARGS``; 0 when every runtime was measured."""
    args = build_parser().parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child, args.runs, args.tokens)))
        return 0
    names = [*RUNTIMES, *(["onnx-genai-int8"] if args.int8 else [])]
    docs: dict[str, list[dict]] = {name: [] for name in names}
    for _round in range(args.rounds):
        for name in names:
            cmd = [sys.executable, "-m", "engine.bench.llm_runtimes", "--child", name,
                   "--runs", str(args.runs), "--tokens", str(args.tokens)]
            done = subprocess.run(cmd, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                print(f"{name}: failed: {done.stderr.strip().splitlines()[-1:]}", file=sys.stderr)
                return 1
            docs[name].append(json.loads(done.stdout.strip().splitlines()[-1]))
    table = [_summary(name, docs[name]) for name in names]
    print(f"{'runtime':<16} {'first token':>12} {'tokens/s':>9} {'load':>7} {'peak RSS':>9} "
          f"{'installed':>10}")
    for row in table:
        print(f"{row['runtime']:<16} {row['ttft_ms_p50']:>9.1f} ms {row['tokens_per_s_p50']:>9.1f} "
              f"{row['load_s_p50']:>5.2f} s {row['peak_rss_mib']:>5} MiB {row['installed_mib']:>6} MiB")
    for row in table:
        print(f"  {row['runtime']}: {row['reply'][:90]!r}")
    if args.json:
        args.json.write_text(json.dumps(table, indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

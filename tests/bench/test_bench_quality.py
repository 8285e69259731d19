"""``parley-cli bench --quality``: the word normalizer and WER, the spoken test set, the
report, and a short real run (Piper-voiced items through the bundled models, both STT
windows side by side)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from engine.bench import quality
from engine.bench.quality import ItemResult, SpokenItem, format_quality, read_test_set, score
from engine.bench.words import (contains_word, corpus_word_error_rate, normalize_words,
                                number_words, word_error_rate, word_errors)
from engine.errors import ConfigError


# ------------------------------------------------------------------ words and WER
def test_numbers_read_as_words_and_punctuation_goes():
    assert normalize_words("1, 2, 3.") == normalize_words("One, two, three!") == "one two three"
    assert normalize_words("Set a timer for 10 minutes.") == "set a timer for ten minutes"
    assert normalize_words("24 hours, 1,000 years") == "twenty four hours one thousand years"
    assert normalize_words("Agent 007") == "agent zero zero seven"
    assert normalize_words("Don't 'quote' the dogs' bowls") == "don't quote the dogs bowls"
    assert normalize_words("") == ""
    assert number_words(342) == "three hundred forty two"
    assert number_words(1_000_001) == "one zero zero zero zero zero one"


def test_word_errors_count_substitutions_deletions_and_insertions():
    assert word_errors("ask not what your country", "ask not what your country") == (0, 5)
    assert word_errors("ask not what your country", "ask what your county") == (2, 5)
    assert word_errors("one two", "one two three four") == (2, 2)
    assert word_errors("What is 2 plus 2?", "what is two plus two") == (0, 5)
    assert word_error_rate("a b c d", "a x c") == 0.5
    assert word_error_rate("", "") == 0.0 and word_error_rate("", "noise") == 1.0


def test_corpus_wer_weighs_items_by_their_length():
    pairs = [("one", "two"), ("a b c d e f g h i", "a b c d e f g h i")]
    assert corpus_word_error_rate(pairs) == pytest.approx(1 / 10)
    assert corpus_word_error_rate([]) == 0.0


def test_keywords_match_whole_words_and_plurals():
    assert contains_word("The capital of France is Paris.", "paris")
    assert contains_word("Cats say meow.", "cat") and not contains_word("A category.", "cat")
    assert contains_word("There are 24 hours in a day.", "twenty four")
    assert contains_word("A week has 7 days.", "seven")
    assert not contains_word("anything", "")


# ------------------------------------------------------------------ the test set
def test_the_bundled_test_set_is_complete():
    listed = read_test_set()
    assert len(listed["spoken"]) >= 12 and {r["file"] for r in listed["recordings"]} >= {
        "jfk.flac", "one_two_three_44k.wav"}
    assert 1.0 in listed["rates"] and len(listed["rates"]) > 1  # more than one rendering each
    for item in listed["spoken"]:
        if item["text"].endswith("?"):
            assert item.get("keyword"), item  # every question says what a right answer holds


def test_a_bad_test_set_is_named(tmp_path):
    path = tmp_path / "set.json"
    path.write_text(json.dumps({"spoken": [{"keyword": "x"}]}))
    with pytest.raises(ConfigError, match=r"spoken\[0\] has no 'text'"):
        read_test_set(path)
    path.write_text(json.dumps({"recordings": [{"file": "missing.wav", "text": "hi"}]}))
    with pytest.raises(ConfigError, match=r"'missing.wav' is not in"):
        read_test_set(path)
    path.write_text(json.dumps({"spoken": [{"text": "hi"}], "rates": [1.0, 5]}))
    with pytest.raises(ConfigError, match=r"'rates' must be a list of speaking rates from 0\.5 "
                                          r"to 2\.0; got \[1\.0, 5\]"):
        read_test_set(path)
    path.write_text("{}")
    with pytest.raises(ConfigError, match="lists no items"):
        read_test_set(path)
    with pytest.raises(ConfigError, match="does not exist"):
        read_test_set(tmp_path / "none.json")


def test_an_item_is_scored_on_its_words_and_its_keyword():
    item = SpokenItem("q", "What is the capital of France?", "paris", np.zeros(1, np.float32))
    result = score(item, "what is the capital of france", "It is Paris.", 0.1)
    assert (result.errors, result.words, result.answered, result.wer) == (0, 6, True, 0.0)
    wrong = score(item, "what is the capital and france", "I do not know.")
    assert (wrong.errors, wrong.answered) == (1, False)
    statement = SpokenItem("s", "Thank you.", None, np.zeros(1, np.float32))
    assert score(statement, "thank you", "You're welcome.").answered is None


def test_the_report_has_a_line_per_variant_and_every_item():
    results = [ItemResult("q", "What do bees make?", "what do bees make", 0, 4, "honey",
                          "Bees make honey.", True, 0.05),
               ItemResult("s", "Thank you.", "thank", 1, 2, None, "", None, 0.04)]
    doc = {"variants": [{"variant": "stt.window=fit", "summary": quality.summarize(results),
                         "results": [r.__dict__ for r in results]}]}
    text = format_quality(doc)
    assert "stt.window=fit" in text and "16.7%" in text and "1/1" in text and "45 ms" in text
    assert "'what do bees make'  answers" in text


@pytest.mark.parametrize(("argv", "message"), [
    (["--quality", "--limit", "0"], "--limit must be at least 1; got 0"),
    (["--quality", "--compare", "stt.window"],
     "--compare 'stt.window': expected KEY=VALUE1,VALUE2 (e.g. turns.speculative=false,true)"),
    (["--quality", "--compare", "stt.window=full,half"],
     "'stt.window' must be one of full, fit; got 'half'"),
])
def test_bad_arguments_are_refused_before_anything_loads(argv, message, capsys):
    assert quality.main(argv) == 2
    assert capsys.readouterr().err.strip() == f"parley-cli: error: {message}"


def test_parley_cli_bench_dispatches_quality(capsys):
    from engine.cli.main import main

    assert main(["bench", "--quality", "--limit", "-1"]) == 2
    assert "--limit must be at least 1" in capsys.readouterr().err


# ------------------------------------------------------------------ a real run
@pytest.mark.slow
def test_a_short_real_run_scores_both_windows(tmp_path, capsys):
    """Two voiced questions and one_two_three through the bundled VAD, Whisper tiny.en,
    SmolLM2 and Piper, for stt.window full and fit: the words are heard (WER low) and
    every reply is scored."""
    pytest.importorskip("piper")
    from engine.cli.main import add_config_flags

    listed = read_test_set()
    small = {"spoken": listed["spoken"][:2],
             "recordings": [r for r in listed["recordings"] if r["file"] == "one_two_three_44k.wav"]}
    path = quality.AUDIO_DIR / "spoken_test_set.json"
    copy = tmp_path / "set.json"
    copy.write_text(json.dumps(small))
    # The recording is read beside the list: point the copy's folder at the bundled audio.
    (tmp_path / "one_two_three_44k.wav").symlink_to(path.parent / "one_two_three_44k.wav")
    status = quality.main(["--quality", "--test-set", str(copy), "--json",
                           "--compare", "stt.window=full,fit", "--llm-max-new-tokens", "16",
                           "--device", "cpu"], add_config_flags)
    out = capsys.readouterr().out
    assert status == 0
    doc = json.loads(out)
    assert [i["name"] for i in doc["items"]] == ["spoken 1", "spoken 2", "one_two_three_44k.wav"]
    assert [v["variant"] for v in doc["variants"]] == ["stt.window=full", "stt.window=fit"]
    for variant in doc["variants"]:
        summary = variant["summary"]
        assert summary["items"] == 3 and summary["words"] == 17 and summary["questions"] == 2
        assert summary["wer"] <= 0.12, variant  # at most 2 of the 17 words misheard
        assert all(r["transcript"] and r["reply"] for r in variant["results"]), variant

"""speakable: a piece of the LLM's reply -> the words the voice says."""

from __future__ import annotations

import pytest

from engine.stages.chunker import ClauseChunker
from engine.stages.speech_text import speakable


def test_the_regression_keeps_snake_case_and_multiplication():
    assert speakable("Use snake_case and 2*3 is six.") == "Use snake_case and 2*3 is six."


@pytest.mark.parametrize("text, said", [
    ("**bold** and *it* and _it_ and ~~gone~~", "bold and it and it and gone"),
    ("***both*** and __strong__", "both and strong"),
    ("**bold *nested* words**", "bold nested words"),
    ("2*3 is _six_.", "2*3 is six."),
    ("2*3 and 4*5 and 2 * 3 = 6", "2*3 and 4*5 and 2 * 3 = 6"),
    ("a_b_c, my_file_name.txt, config_v2.yaml and __init__.py",
     "a_b_c, my_file_name.txt, config_v2.yaml and __init__.py"),
    # Half a bold pair, left by a cut between two pieces.
    ("**Warning.", "Warning."),
    ("Do not.**", "Do not."),
    ("about ~5 minutes", "about ~5 minutes"),
    (r"\*not emphasis\* and \_this\_", "*not emphasis* and _this_"),
])
def test_emphasis_markers_go_and_names_stay(text, said):
    assert speakable(text) == said


@pytest.mark.parametrize("text, said", [
    ("See [the docs](https://example.com/a_(b)) now.", "See the docs now."),
    ("[**Bold** label](https://x.org \"title\")", "Bold label"),
    ("![a cat](cat.png) and [ref][1]", "a cat and ref"),
    # Bare URLs are said as their host name, without "www.".
    ("Visit https://www.example.com/path?q=1. Or www.python.org, or <https://docs.python.org/3/>.",
     "Visit example.com. Or python.org, or docs.python.org."),
    ("(see https://en.wikipedia.org/wiki/Foo_(bar))", "(see en.wikipedia.org)"),
])
def test_links_say_their_label_and_urls_their_host(text, said):
    assert speakable(text) == said


@pytest.mark.parametrize("text, said", [
    ("# Title\n## Sub ##\n> quoted\n> > deeper", "Title Sub quoted deeper"),
    ("- item one\n* item two\n+ item three", "item one item two item three"),
    ("1. first\n2) second\n10. tenth", "first second tenth"),
    ("- [ ] todo\n- [x] done", "todo done"),
    ("| Name | Age |\n|---|:---:|\n| Bob | 42 |", "Name Age Bob 42"),
    ("Text\n\n---\n\nMore", "Text More"),
    ("#1 priority, C# code and x < y > z", "#1 priority, C# code and x < y > z"),
])
def test_line_markers_tables_and_rules_go(text, said):
    assert speakable(text) == said


@pytest.mark.parametrize("text, said", [
    ("Run `pip install -e .` then `a_b*c`.", "Run pip install -e . then a_b*c."),
    ("Use `**kwargs` and `__init__`", "Use **kwargs and __init__"),
    ("`` code with ` tick ``", "code with ` tick"),
    ("A stray ` tick", "A stray tick"),
    # Fenced code blocks are not said at all.
    ("Here:\n```python\nprint('hi')  # 2*3\n```\nDone.", "Here: Done."),
    ("~~~\nls -la\n~~~\nAfter", "After"),
    ("```bash\nls -la", ""),  # a block still open at the end of the piece
    ("```python\nx = 1\n```", ""),
    ("Inline ```code``` on one line", "Inline code on one line"),
])
def test_code_spans_keep_their_words_and_code_blocks_are_dropped(text, said):
    assert speakable(text) == said


@pytest.mark.parametrize("text", [
    "It costs 3.5 dollars, or 1,000.25 euros.",
    "Ask Dr. Smith, e.g. tomorrow, i.e. soon.",
    "Wait... no. Wait… yes.",
    "こんにちは、世界。",
    "Привет, мир!",
    "مرحبا بالعالم",
    "你好！他说：「好的。」",
    "Ça coûte 5 € — d'accord?",
])
def test_plain_text_numbers_abbreviations_and_non_latin_pass_unchanged(text):
    assert speakable(text) == text


@pytest.mark.parametrize("text, said", [
    ("Great job 🎉👍🏽!", "Great job!"),
    ("❤️ Love it ✨ 🇺🇸", "Love it"),
    ("** 🙂 **", ""),
    ("---", ""),
    ("   \n\t ", ""),
    ("...", ""),
])
def test_emoji_go_and_nothing_to_say_is_empty(text, said):
    assert speakable(text) == said


def test_whitespace_collapses_to_one_line():
    assert speakable("  one\n\ntwo\tthree  ") == "one two three"


def test_chunker_then_speakable_says_what_a_person_would():
    reply = ("Sure, here's what I found:\n"
             "- **Python 3.12** is faster, e.g. for loops.\n"
             "- Read [the docs](https://docs.python.org/3/) 📚\n"
             "- Use `snake_case` names, not `camelCase`.\n"
             "\n"
             "Dr. Smith says 2*3 is 6... Good luck! 🎉")
    chunker = ClauseChunker()
    pieces = []
    for i in range(0, len(reply), 2):
        pieces += chunker.feed(reply[i:i + 2])
    pieces.append(chunker.flush())
    said = [s for s in (speakable(p) for p in pieces) if s]
    assert said == ["Sure, here's what I found:",
                    "Python 3.12 is faster, e.g. for loops.",
                    "Read the docs",
                    "Use snake_case names, not camelCase.",
                    "Dr. Smith says 2*3 is 6...",
                    "Good luck!"]

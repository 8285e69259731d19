"""ClauseChunker: where a streaming reply is cut; the pieces are the LLM's text as written."""

from __future__ import annotations

import itertools
import random
import re

import pytest

from engine.stages.chunker import ClauseChunker


def chunk(text: str, sizes=None, chunker: ClauseChunker | None = None) -> list[str]:
    """Feed ``text`` in deltas of the given sizes (all at once by default); all pieces."""
    chunker = chunker or ClauseChunker()
    pieces: list[str] = []
    if sizes is None:
        pieces += chunker.feed(text)
    else:
        i = 0
        for size in sizes:
            if i >= len(text):
                break
            pieces += chunker.feed(text[i:i + size])
            i += size
    rest = chunker.flush()
    return pieces + ([rest] if rest else [])


def test_the_regression_keeps_every_character():
    assert ClauseChunker().feed("Use snake_case and 2*3 is six. ") == ["Use snake_case and 2*3 is six."]


def test_markdown_stays_as_written():
    text = "This is **bold**, see [the docs](https://x.org/a_b) and `a_b*c`. Done ~~now~~ 🎉."
    assert chunk(text) == ["This is **bold**,", "see [the docs](https://x.org/a_b) and `a_b*c`.",
                           "Done ~~now~~ 🎉."]


def test_first_clause_goes_out_early_then_sentences():
    chunker = ClauseChunker()
    assert chunker.feed("Sure, here is the plan: first") == ["Sure, here is the plan:"]
    assert chunker.sentences == 0  # a clause is not a sentence
    assert chunker.feed(" we go, then we stop. Then") == ["first we go, then we stop."]
    assert chunker.sentences == 1
    assert chunker.flush() == "Then"
    assert chunker.sentences == 2


def test_a_short_first_clause_waits_for_the_sentence():
    assert chunk("Yes, sure. Fine, thanks.") == ["Yes, sure.", "Fine, thanks."]
    assert chunk("Well, yes, I think so.", chunker=ClauseChunker(min_first_words=5)) == \
        ["Well, yes, I think so."]


@pytest.mark.parametrize("text, pieces", [
    # No comma: the first piece ends before a conjunction that starts a clause.
    ("The sea is salty because of the rain. It is.", ["The sea is salty", "because of the rain.", "It is."]),
    ("I can do that but not today. Fine.", ["I can do that", "but not today.", "Fine."]),
    ("Paris - the capital of France - is big. Yes.",
     ["Paris - the capital of France -", "is big.", "Yes."]),  # "Paris -" is 1 word: too short
    ("The capital of France is Paris, the city. More.",
     ["The capital of France is Paris,", "the city.", "More."]),
])
def test_the_first_piece_ends_at_the_first_natural_break(text, pieces):
    assert chunk(text) == pieces
    assert chunk(text, sizes=itertools.repeat(2)) == pieces  # streamed: the same cuts


@pytest.mark.parametrize("text", [
    "It costs 3,000 dollars and 10:30 is late. Ok.",  # no space after the mark: one number
    "It costs 3 - 2 dollars in all here. Ok.",  # a minus between digits is no dash
    "I like nothing but pears and apples. Ok.",  # "nothing but" starts no clause
    "We saw it all but the end of it. Ok.",
    "Take salt and pepper or sugar so much. Ok.",  # and / or / so are not cut at
    "I know why (it rains) but not how. Ok.",  # after a mark: no conjunction cut
])
def test_no_first_clause_cut_inside_numbers_or_at_ambiguous_words(text):
    first = text.split(". ")[0] + "."
    assert chunk(text) == [first, "Ok."]


def test_first_clause_words_zero_sends_whole_sentences():
    text = "Well, yes, I think so, but no. Then, later, we go."
    assert chunk(text, chunker=ClauseChunker(min_first_words=0)) == [
        "Well, yes, I think so, but no.", "Then, later, we go."]
    assert chunk(text, chunker=ClauseChunker(min_first_words=3)) == [
        "Well, yes, I think so,", "but no.", "Then, later, we go."]


def test_only_the_first_piece_is_short():
    text = "Yes. I can help you with that, but not now. Later, maybe."
    assert chunk(text) == ["Yes.", "I can help you with that, but not now.", "Later, maybe."]


def test_marks_alone_are_not_words():
    # "**Note** - here," holds two words (a lone "-" is none): too few for a clause of three.
    assert chunk("**Note** - here, there is more. Ok.") == ["**Note** - here, there is more.", "Ok."]
    assert chunk("**Note** - here and there, more. Ok.") == [
        "**Note** - here and there,", "more.", "Ok."]


@pytest.mark.parametrize("text, pieces", [
    ("Run `a. b` now. Next one.", ["Run `a. b` now.", "Next one."]),
    ("Try ``x`. y`` too. Ok.", ["Try ``x`. y`` too.", "Ok."]),
    ("See [Dr. Who. Docs](https://x.com/a.b) today. Bye.",
     ["See [Dr. Who. Docs](https://x.com/a.b) today.", "Bye."]),
    ("Go to http://x.com/a.b now. Then stop.", ["Go to http://x.com/a.b now.", "Then stop."]),
    ("Visit https://example.com. It helps.", ["Visit https://example.com.", "It helps."]),
])
def test_no_cut_inside_code_links_or_urls(text, pieces):
    assert chunk(text) == pieces


@pytest.mark.parametrize("text, pieces", [
    ("It costs 3.5 dollars. Pay 1,000.25 now.", ["It costs 3.5 dollars.", "Pay 1,000.25 now."]),
    ("Ask Dr. Smith, e.g. tomorrow, i.e. soon. Or Mr. Jones.",
     ["Ask Dr. Smith,", "e.g. tomorrow, i.e. soon.", "Or Mr. Jones."]),
    ("I like apples, pears, etc. and more. We have apples etc. Then go.",
     ["I like apples,", "pears, etc. and more.", "We have apples etc.", "Then go."]),
    ("So do I. Then J. R. R. Tolkien wrote it.", ["So do I.", "Then J. R. R. Tolkien wrote it."]),
    ("It is **done.** Next one.", ["It is **done.**", "Next one."]),
    ('She said "Yes." Then left.', ['She said "Yes."', "Then left."]),
])
def test_decimals_and_abbreviations_do_not_end_a_sentence(text, pieces):
    assert chunk(text) == pieces


def test_an_ellipsis_ends_a_sentence_only_before_a_capital_or_at_the_end():
    assert chunk("Wait... no, I mean yes. Wait... Done. Hmm…") == \
        ["Wait... no, I mean yes.", "Wait...", "Done.", "Hmm…"]
    assert chunk("Well… Привет.") == ["Well…", "Привет."]
    chunker = ClauseChunker()
    assert chunker.feed("Wait... ") == []  # the next word decides
    assert chunker.feed("no. Wait... ") == ["Wait... no."]
    assert chunker.feed("Now.") == ["Wait..."]
    assert chunker.flush() == "Now."


def test_each_list_item_is_a_piece():
    text = ("Here are three options:\n- **Fast**: use `a. b` now.\n- Slow. Really slow.\n"
            "- Cheap\n\nThat's it.")
    assert chunk(text) == ["Here are three options:", "- **Fast**: use `a. b` now.", "- Slow.",
                           "Really slow.", "- Cheap", "That's it."]


def test_numbered_lists_headings_and_tables():
    chunker = ClauseChunker()
    assert chunk("Steps:\n1. Mix the flour.\n2. Add water\n3. Bake", chunker=chunker) == \
        ["Steps:", "1. Mix the flour.", "2. Add water", "3. Bake"]
    assert chunker.sentences == 4
    assert chunk("## Next steps\nVisit the site. Thanks!") == ["## Next steps", "Visit the site.", "Thanks!"]
    assert chunk("| Name | Age |\n|---|---|\n| Bob | 42 |\n\nThat's the table.") == \
        ["| Name | Age |", "|---|---|", "| Bob | 42 |", "That's the table."]


def test_a_wrapped_line_or_quote_is_not_a_cut():
    assert chunk("This line\nwraps here. Next.") == ["This line\nwraps here.", "Next."]
    assert chunk("> Quoted text\n> goes on. After.") == ["> Quoted text\n> goes on.", "After."]


def test_a_list_marker_is_awaited_before_cutting_at_a_line_break():
    chunker = ClauseChunker()
    assert chunker.feed("Options:\n-") == []
    assert chunker.feed(" one\n") == ["Options:", "- one"]
    assert chunker.feed("- two") == []
    assert chunker.flush() == "- two"


def test_a_code_block_is_one_piece():
    assert chunk("Here:\n```python\nx = 1. y = 2\nprint(x)\n```\nDone. Yes.") == \
        ["Here:", "```python\nx = 1. y = 2\nprint(x)\n```", "Done.", "Yes."]


def test_a_stray_backtick_holds_cuts_only_until_a_paragraph_break():
    chunker = ClauseChunker()
    assert chunker.feed("A stray ` tick. Goes on. ") == []
    assert chunker.feed("\n\nNext one. ") == ["A stray ` tick.", "Goes on.", "Next one."]


def test_cjk_full_stops_end_sentences():
    assert chunk("こんにちは。元気ですか？はい！") == ["こんにちは。", "元気ですか？", "はい！"]
    assert chunk("「你好。」他说。") == ["「你好。」", "他说。"]
    assert chunk("Привет, как дела? Хорошо.") == ["Привет, как дела?", "Хорошо."]


def test_emoji_stay_in_their_piece():
    assert chunk("Great job 🎉! See you. 👋") == ["Great job 🎉!", "See you.", "👋"]


def test_flush_of_nothing_is_empty_and_not_a_sentence():
    chunker = ClauseChunker()
    assert chunker.feed("  \n ") == []
    assert chunker.flush() == ""
    assert chunker.sentences == 0


TRICKY = [
    "Use snake_case and 2*3 is six. ",
    "Sure, here's what I found:\n- **Python 3.12** is faster, e.g. for loops.\n"
    "- Read [the docs](https://docs.python.org/3/) 📚\n- Use `snake_case` names, not `camelCase`.\n\n"
    "Dr. Smith says 2*3 is 6... Good luck! 🎉",
    "Wait... no, I mean yes. Wait... Done. It costs 3.5 dollars, etc. Then I. M. Pei came.",
    "Steps:\n1. Mix the flour.\n2. Add water\n\n## Next\nGo to http://x.com/a.b now. Run `a. b`. End",
    "Here:\n```python\nx = 1. y = 2\n```\nDone. See [Dr. Who. Docs](https://x.com/(a).b) ok.",
    "| a | b |\n|---|---|\n| 1 | 2 |\n\nThat's it... Привет, мир! こんにちは。元気？はい",
]


@pytest.mark.parametrize("text", TRICKY)
def test_streamed_in_small_deltas_the_pieces_are_the_same(text):
    whole = chunk(text)
    assert chunk(text, itertools.cycle([1, 2, 3])) == whole
    assert chunk(text, itertools.repeat(1)) == whole
    rng = random.Random(sum(map(ord, text)))
    assert chunk(text, iter(lambda: rng.randint(1, 3), None)) == whole
    # Only whitespace at the cuts is gone: the words, and every other character, remain.
    if not re.search("[。！？]", text):
        assert " ".join(whole).split() == text.split()
    assert re.sub(r"\s", "", "".join(whole)) == re.sub(r"\s", "", text)

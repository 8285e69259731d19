"""Languages by their ISO 639-1 code, as Whisper detects them and the settings name them.

One table for every place a language is shown or said: the reply instruction the LLM is
given, the voice picked per language, the settings' language lists, the message that a
language has no voice.
"""

from __future__ import annotations

import re

#: The languages Parley names (Whisper's, where a voice model or a reply rule exists for
#: them, and the other common ones): code -> English name.
LANGUAGE_NAMES: dict[str, str] = {
    "en": "English", "fr": "French", "de": "German", "es": "Spanish", "it": "Italian",
    "pt": "Portuguese", "nl": "Dutch", "pl": "Polish", "ru": "Russian", "uk": "Ukrainian",
    "cs": "Czech", "sv": "Swedish", "da": "Danish", "no": "Norwegian", "fi": "Finnish",
    "el": "Greek", "tr": "Turkish", "ar": "Arabic", "fa": "Persian", "he": "Hebrew",
    "hi": "Hindi", "ja": "Japanese", "zh": "Chinese", "ko": "Korean", "vi": "Vietnamese",
    "ca": "Catalan", "hu": "Hungarian", "ro": "Romanian", "id": "Indonesian",
}

#: How each language asks for a reply in itself (a small model follows an instruction
#: in the reply's own language more often; see ``reply_instruction``).
_REPLY_IN: dict[str, str] = {
    "en": "Answer in English.",
    "fr": "Réponds en français.",
    "de": "Antworte auf Deutsch.",
    "es": "Responde en español.",
    "it": "Rispondi in italiano.",
    "pt": "Responda em português.",
    "nl": "Antwoord in het Nederlands.",
    "ja": "日本語で答えてください。",
    "zh": "请用中文回答。",
}

_CODE = re.compile(r"[a-z]{2,3}")


def language_name(code: str) -> str:
    """``"French (fr)"`` for ``"fr"``; a code Parley has no name for is shown as itself."""
    name = LANGUAGE_NAMES.get(code)
    return f"{name} ({code})" if name else code


def is_language_code(code: str) -> bool:
    """Whether ``code`` is written as an ISO 639 code: two or three lowercase letters."""
    return bool(_CODE.fullmatch(code))


def base_language(code: str | None) -> str | None:
    """The language of a locale or voice tag: ``en_US`` and ``en-us`` are ``en``."""
    if not code:
        return None
    return re.split(r"[-_]", code.strip(), maxsplit=1)[0].lower() or None


def reply_instruction(code: str) -> str:
    """The words that tell the LLM to answer in ``code``'s language.

    In the language itself where Parley has them, else in English naming the language.
    """
    own = _REPLY_IN.get(code)
    if own is not None:
        return own
    return f"Answer in {LANGUAGE_NAMES.get(code, code)}."

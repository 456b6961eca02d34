"""What the CLI prints shows control characters and never obeys them, on every path of
:func:`meshtui.terminal.shown` (the ASCII check by bytes, the regex for the rest)."""

from __future__ import annotations

import sys

from meshtui.terminal import CONTROL, shown


def reference(text: str) -> str:
    """Every control character but newline and tab as ``\\xNN``, by the regex alone."""
    return CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def test_every_code_point_is_shown_as_the_regex_says() -> None:
    for code in range(sys.maxunicode + 1):
        if 0xD800 <= code <= 0xDFFF:
            continue  # a lone surrogate is no text a stream writes
        c = chr(code)
        for text in (c, f"ok {c} ok", f'{{"k": "{c}"}}\n'):
            assert shown(text) == reference(text), hex(code)


def test_plain_text_comes_back_as_it_was() -> None:
    text = '[\n  {\n    "pair": "database:app1/gitea->db1/postgres",\t"ok": true\n  }\n]'
    assert shown(text) is text
    assert shown(text + "\x1b]52;c;AAAA\x07") == text + "\\x1b]52;c;AAAA\\x07"
    assert shown("é\x9b31m") == "é\\x9b31m"

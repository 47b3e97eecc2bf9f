"""Where statements end in typed input: at a ``;`` outside quotes and comments.

The shell runs each statement as soon as its ``;`` arrives and keeps the rest
pending, as psql does, so ``SELECT 1; SELECT 2`` runs both and a ``;`` inside
``'a;b'`` or ``-- a;`` ends nothing.
"""

from __future__ import annotations

import re

_DOLLAR = re.compile(r"\$([A-Za-z_][A-Za-z0-9_]*)?\$")


class Splitter:
    """Text typed so far; :meth:`feed` returns the statements it completes."""

    def __init__(self) -> None:
        self.pending = ""
        self._quote: str | None = None  # ', ", a $tag$, or /* (comment depth below)
        self._depth = 0
        self._scanned = 0  # pending[:_scanned] holds no statement end

    @property
    def in_literal(self) -> bool:
        """Inside a quoted string or a block comment: a line there is data, not a command."""
        return self._quote is not None

    @property
    def quote_char(self) -> str | None:
        """For the prompt, as psql shows it: ``'``, ``"``, ``$`` or ``*`` (a comment)."""
        if self._quote is None:
            return None
        return {"/*": "*", "'": "'", '"': '"'}.get(self._quote, "$")

    def reset(self) -> str:
        dropped, self.pending = self.pending, ""
        self._quote, self._depth, self._scanned = None, 0, 0
        return dropped

    def feed(self, line: str) -> list[str]:
        self.pending += line + "\n"
        done: list[str] = []
        text, i = self.pending, self._scanned
        while i < len(text):
            ch = text[i]
            if self._quote == "/*":
                if text.startswith("/*", i):
                    self._depth, i = self._depth + 1, i + 2
                elif text.startswith("*/", i):
                    self._depth, i = self._depth - 1, i + 2
                    if self._depth == 0:
                        self._quote = None
                else:
                    i += 1
            elif self._quote is not None:
                if text.startswith(self._quote, i):
                    i += len(self._quote)
                    self._quote = None  # '' inside a string: closes and reopens at once
                else:
                    i += 1
            elif ch in "'\"":
                self._quote, i = ch, i + 1
            elif text.startswith("--", i):
                end = text.find("\n", i)
                i = len(text) if end < 0 else end + 1
            elif text.startswith("/*", i):
                self._quote, self._depth, i = "/*", 1, i + 2
            elif ch == "$" and (m := _DOLLAR.match(text, i)) and not _in_word(text, i):
                self._quote, i = m.group(0), m.end()
            elif ch == ";":
                statement = text[: i + 1].strip()
                if statement != ";":
                    done.append(statement)
                text, i = text[i + 1:], 0
            else:
                i += 1
        self.pending, self._scanned = text, len(text)
        if not self.pending.strip():
            self.pending, self._scanned = "", 0
        return done


def _in_word(text: str, i: int) -> bool:
    """``$1`` parameters and names like ``a$b`` do not open dollar quotes."""
    return i > 0 and (text[i - 1].isalnum() or text[i - 1] == "_")

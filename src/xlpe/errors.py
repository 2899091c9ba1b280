"""One exception family for every user-facing error.

Messages name the file, the line (1-based, as an editor shows it) and what was expected, e.g.::

    data/train.align:17: link '3-x' is malformed (expected 'i-j', 'ipj' or 'i?j' with integer i, j)
"""

from __future__ import annotations

import os


class XlpeError(Exception):
    """Base class of every error xlpe raises on purpose (bad input, bad config, bad state)."""


class ConfigError(XlpeError):
    """An option or configuration value that cannot work (unknown encoding, tau > H, ...)."""


class FormatError(XlpeError):
    """Input that does not match its declared format.

    Args:
        message: what is wrong.
        path: the file (or a pseudo-name such as ``<stdin>``); optional.
        line: 1-based line number inside ``path``; optional.
        expected: what the reader expected instead; optional.
    """

    def __init__(self, message: str, path: str | os.PathLike | None = None, line: int | None = None,
                 expected: str | None = None):
        self.message = message
        self.path = None if path is None else os.fspath(path)
        self.line = line
        self.expected = expected
        super().__init__(self._render())

    def _render(self) -> str:
        where = ""
        if self.path is not None:
            where = self.path + (f":{self.line}" if self.line is not None else "") + ": "
        elif self.line is not None:
            where = f"line {self.line}: "
        tail = f" (expected {self.expected})" if self.expected else ""
        return f"{where}{self.message}{tail}"

    def at(self, path: str | os.PathLike | None = None, line: int | None = None) -> "FormatError":
        """Return a copy that names ``path``/``line`` where this error did not know them yet."""
        return FormatError(self.message, self.path if self.path is not None else path,
                           self.line if self.line is not None else line, self.expected)

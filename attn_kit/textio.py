"""One text policy for every command that reads text (translate, the recipes' corpora, score_bleu,
evalb), defined once: UTF-8, strict by default (a byte sequence that is not is one error naming the
file and line; ``--errors replace`` reads it as U+FFFD); a byte-order mark at the start removed;
``\\n``, ``\\r\\n`` and a lone ``\\r`` each end a line. Lines are streamed from the binary input, so a
large corpus is never held in memory and stdin needs no particular locale.
"""
import re
from pathlib import Path
from typing import BinaryIO, Iterator, List, Union

from .cli import UsageError, UserError

ERRORS = ("strict", "replace")
BOM = b"\xef\xbb\xbf"
_LINE_END = re.compile(r"\r\n|\r|\n")
# The longest line any command reads: a sentence, a tree or a translation is far shorter (WMT's longest
# training lines are some KB); a longer one is a file that is not one sentence per line.
MAX_LINE_BYTES = 1 << 20


def add_errors_option(parser):
    """``--errors``: what to do with bytes that are not UTF-8 (this module's policy)."""
    parser.add_argument("--errors", choices=ERRORS, default="strict",
                        help="bytes that are not UTF-8: strict (default) stops with one line naming the file "
                             "and line; replace reads them as U+FFFD")


def iter_lines(source: Union[str, Path, BinaryIO], name: str = None, errors: str = "strict") -> Iterator[str]:
    """The lines of ``source`` (a path, or a binary stream such as ``sys.stdin.buffer``) as text,
    under this module's policy. ``name`` says what the error line calls the input (default: the
    path, or "standard input")."""
    if errors not in ERRORS:
        raise UsageError(f"--errors must be one of {', '.join(ERRORS)}, not {errors!r}")
    if isinstance(source, (str, Path)):
        name = name or str(source)
        try:
            stream = open(source, "rb")
        except FileNotFoundError:
            raise UserError(f"{name}: no such file") from None
        except IsADirectoryError:
            raise UserError(f"{name} is a folder, not a text file") from None
        with stream:
            yield from _lines(stream, name, errors)
    else:
        yield from _lines(source, name or "standard input", errors)


def read_lines(source, name: str = None, errors: str = "strict") -> List[str]:
    """:func:`iter_lines` as a list."""
    return list(iter_lines(source, name, errors))


def _raw_lines(stream: BinaryIO, name: str) -> Iterator[bytes]:
    """The stream's byte lines, read with at most about :data:`MAX_LINE_BYTES` in memory: a line longer
    than that (a file with no line breaks, /dev/zero) is one UserError, not all of memory. A chunk
    without ``\n`` is cut after its last ``\r`` (a lone CR ends a line too)."""
    count, carry = 0, b""
    while True:
        raw = carry + stream.readline(MAX_LINE_BYTES + 1 - len(carry))
        carry = b""
        if not raw:
            return
        if len(raw) > MAX_LINE_BYTES and not raw.endswith(b"\n"):
            cut = raw.rfind(b"\r", 0, len(raw) - 1) + 1
            if cut == 0:
                raise UserError(f"{name}: line {count + 1} is longer than {MAX_LINE_BYTES // 2 ** 20} MiB (a file "
                                "without line breaks, or not a text file?): the commands read one sentence per line")
            raw, carry = raw[:cut], raw[cut:]
        count += raw.count(b"\n") + len(re.findall(rb"\r(?!\n)", raw))
        yield raw


def _lines(stream: BinaryIO, name: str, errors: str) -> Iterator[str]:
    number = 0
    for i, raw in enumerate(_raw_lines(stream, name)):
        if i == 0 and raw.startswith(BOM):
            raw = raw[len(BOM):]
        try:
            text = raw.decode("utf-8", errors)
        except UnicodeDecodeError as exc:
            before = re.split(rb"\r\n|\r", raw[:exc.start])  # lines a lone CR ended before the bad byte
            raise UserError(f"{name}: line {number + len(before)} is not UTF-8 (byte 0x{raw[exc.start]:02x} at "
                            f"byte {len(before[-1]) + 1} of the line); fix the file, or pass --errors replace to "
                            "read such bytes as U+FFFD") from None
        parts = _LINE_END.split(text)
        if parts and parts[-1] == "":  # the line's own end
            parts.pop()
        for part in parts:
            number += 1
            yield part

"""What every attn_kit command line shares: one-line errors, log lines, atomic writes.

A problem the user can fix is raised as :class:`UserError` (or :class:`UsageError` for a bad
command line) anywhere below a command's ``main``; :func:`main_guard` prints it (and the plugin's
own ``AttnPluginError``) as one ``error: <message>`` line and exits 1 (2 for usage), with no
traceback; Ctrl-C exits 130 and SIGTERM 143 (SIGHUP 129, SIGQUIT 131), keeping finished work; a
reader of standard output that goes away ends a command quietly (141), a full or closed standard
stream is one line. Files are written whole or not at all (:func:`atomic_output`); a full disk is
one line naming the file.
"""
import argparse
import errno
import io
import json
import math
import os
import shutil
import signal
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Optional, Sequence


class UserError(Exception):
    """A problem the message fully explains; reported as one line, exit status 1."""

    exit_status = 1


class UsageError(UserError):
    """A command line that does not make sense; exit status 2, as argparse uses."""

    exit_status = 2


def one_line(what: str, value, where: str = "a generated command") -> str:
    """``value`` as text to write into a script or command line the kit generates: one UsageError naming
    ``what`` if it holds a line break or another control character, which would start a line of its
    own there (a shell line the user's value wrote), whatever the quoting."""
    text = str(value)
    bad = next((c for c in text if ord(c) < 32 or ord(c) == 127), None)
    if bad is not None:
        raise UsageError(f"{what} {text!r}: {where} cannot hold a control character ({bad!r}); give it without one")
    return text


class Number:
    """An option's type that is a number in a range: ``type=Number(int, minimum=1)``. argparse calls
    it on the text; a value that is not a number of ``kind``, not finite, or out of the range is
    argparse's one error line naming the option ("argument --beam: -1 is not >= 1"). Every numeric
    option of a kit command that is not a recipe's (the recipes check theirs where their settings
    are built, attn_kit.recipes.settings) has one, so its range is written beside it, once."""

    def __init__(self, kind=int, minimum=None, maximum=None, above=None, below=None):
        self.kind, self.minimum, self.maximum, self.above, self.below = kind, minimum, maximum, above, below
        self.__name__ = kind.__name__  # argparse's "invalid int value" for text that is no number

    def __call__(self, text: str):
        value = self.kind(text)
        if isinstance(value, float) and not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"{text} is not a finite number")
        for ok, what in ((self.minimum is None or value >= self.minimum, f">= {self.minimum}"),
                         (self.above is None or value > self.above, f"> {self.above}"),
                         (self.maximum is None or value <= self.maximum, f"<= {self.maximum}"),
                         (self.below is None or value < self.below, f"< {self.below}")):
            if not ok:
                raise argparse.ArgumentTypeError(f"{text} is not {what}")
        return value

    def __repr__(self):
        return (f"Number({self.kind.__name__}, minimum={self.minimum}, maximum={self.maximum}, above={self.above}, "
                f"below={self.below})")


# Options renamed so that one name means one thing everywhere (their old names are no aliases: no
# results file on record used them); a command given one says the new name in its error line
RENAMED = {"--alpha": "--gnmt-alpha", "--dropout": "--p-drop", "--heads": "--h", "--minutes": "--train-minutes",
           "--minutes-per-row": "--train-minutes"}


class ArgumentParser(argparse.ArgumentParser):
    """argparse's parser whose errors (an unknown option, a value of the wrong type, a bad choice) are
    one ``error:`` line through :func:`main_guard`, as every other usage error of the kit, instead of
    argparse's usage text and its own error line; ``--help`` still shows the usage."""

    def error(self, message):
        renamed = [f"{old} is now {new}" for old, new in RENAMED.items()
                   if message.startswith("unrecognized arguments:") and old in message.split()]
        raise UsageError(f"{message} ({'; '.join(renamed) + '; ' if renamed else ''}{self.prog} --help for the options)")

    # NaN and infinity: a kit command's numeric options are Number (finite, in range); a recipe's are
    # checked where its settings are built (attn_kit.recipes.settings.check_types), the YAML's too


def error_line(message) -> str:
    """The one line a failure is reported as: ``error: <message>`` (newlines folded).

    The plugin's ``sys.excepthook`` prints its errors in fairseq's own commands
    with a copy of this function (``attn_plugin.errors.error_line``: the plugin
    imports nothing from attn_kit); the two must agree, which
    tests/test_registration.py checks."""
    text = " ".join(str(message).split("\n")).strip()
    return text if text.startswith("error: ") else f"error: {text}"


def _user_error(exc: BaseException) -> bool:
    if isinstance(exc, UserError):
        return True
    plugin = sys.modules.get("attn_plugin.errors")  # only if the plugin is loaded: importing it costs seconds
    return plugin is not None and isinstance(exc, plugin.AttnPluginError)


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the program is (see :func:`main_guard`) so that it unwinds as Ctrl-C does."""


_GUARDED = []  # the pid that installed the SIGTERM handler (forked workers inherit the handler, not the role)
_SIGNALLED = []  # the Ctrl-C and SIGTERM main_guard's handlers received


# What ends a command as SIGTERM does (one line, its exit status, finished work kept): a scheduler's or
# kill's SIGTERM, a closed terminal or ssh connection's SIGHUP, Ctrl-\'s SIGQUIT
ENDING = (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)


def _terminate(signum, frame):
    if _GUARDED and os.getpid() != _GUARDED[0]:  # a forked process that has not reset the handler yet: just end
        os._exit(128 + signum)
    _SIGNALLED.append(signum)
    raise Terminated()


def _interrupt(signum, frame):
    _SIGNALLED.append(signum)
    raise KeyboardInterrupt()


def raise_if_signalled():
    """Raise again a Ctrl-C or SIGTERM that this command received and lost on the way: Python
    drops an exception raised in a finalizer (``__del__``), and a C extension interrupted inside
    may report its own error instead (matplotlib's "Invalid bounding box"). A loop that would go
    on after it calls this (:func:`attn_kit.pipeline.process.stream` at each line)."""
    if _SIGNALLED:
        raise KeyboardInterrupt() if _SIGNALLED[0] == signal.SIGINT else Terminated()


def _interrupted_line(signum: int, interrupted: str) -> str:
    return error_line(interrupted if signum == signal.SIGINT else
                      interrupted.replace("interrupted", f"terminated ({signal.Signals(signum).name})", 1))


def _exit_on_signal(interrupted: Optional[str]):
    """Once ``main`` has returned or failed: a Ctrl-C or SIGTERM ends the process at once with
    exit 130 or 143 and, unless ``interrupted`` is None (the one line is printed already), its line;
    nothing unwinds, so nothing on the way out prints a traceback."""
    def leave(signum, frame):
        if interrupted is not None:
            os.write(2, (_interrupted_line(signum, interrupted) + "\n").encode())
        try:
            sys.stdout.flush()
        except Exception:  # noqa: BLE001 -- the signal came in the middle of a write: what is buffered is lost
            pass
        os._exit(128 + signum)

    for sig in (signal.SIGINT, *ENDING):
        if signal.getsignal(sig) in (_interrupt, _terminate):
            signal.signal(sig, leave)


class _Closed:
    """``sys.stdin`` or ``sys.stdout`` where the shell closed it (``<&-``, ``>&-``; Python then has None):
    using it is one error line, where it was an AttributeError traceback."""

    def __init__(self, name: str, remedy: str):
        self._name, self._remedy = name, remedy

    def flush(self):  # what Python does at exit: nothing to flush
        pass

    def __getattr__(self, attr):
        raise UserError(f"{self._name} is closed: {self._remedy}")


def _reader_gone() -> bool:
    """Whether standard output is a pipe whose reader has ended (``| head -1``)."""
    import select

    try:
        poll = select.poll()
        poll.register(1, select.POLLOUT)
        return any(event & select.POLLERR for _, event in poll.poll(0))
    except (OSError, ValueError, AttributeError):
        return False


STDOUT = "standard output"


class _StdoutFile(io.RawIOBase):
    """File descriptor 1 under ``sys.stdout``, whose write errors name it (a full disk, /dev/full, a reader
    gone): Python's own say "[Errno 28] No space left on device", naming no file."""

    def writable(self):
        return True

    def fileno(self):
        return 1

    def isatty(self):
        return os.isatty(1)

    def write(self, data):
        try:
            return os.write(1, data)
        except OSError as exc:
            raise type(exc)(exc.errno, exc.strerror, STDOUT) from None


def _name_stdout():
    """``sys.stdout`` on :class:`_StdoutFile`, as Python set it up (encoding, errors, line buffering), where
    it is the process's own standard output (not a test's capture)."""
    out = sys.stdout
    if out is not sys.__stdout__ or isinstance(out, _Closed) or getattr(out, "_attn_named", False):
        return
    try:
        if out.fileno() != 1:
            return
        out.flush()
    except (OSError, ValueError, AttributeError, io.UnsupportedOperation):
        return
    named = io.TextIOWrapper(io.BufferedWriter(_StdoutFile()), encoding=out.encoding, errors=out.errors,
                             line_buffering=out.line_buffering, write_through=getattr(out, "write_through", False))
    named._attn_named = True
    sys.stdout = sys.__stdout__ = named


def _stdout_failure() -> Optional[OSError]:
    """The error writing what standard output still buffers gives, None if it writes."""
    try:
        sys.stdout.flush()  # (a closed one, _Closed, flushes nothing)
    except OSError as exc:
        return exc
    return None


def _leave_stdout(status: int, line: Optional[str] = None):
    """Exit with ``status`` (and ``line`` on stderr) without writing standard output again: it is gone or
    full, and Python's own flush at exit would print a second error."""
    if line:
        print(line, file=sys.stderr, flush=True)
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
    except OSError:
        pass
    sys.exit(status)


def main_guard(main: Callable[..., Optional[int]], *args, interrupted: str = "interrupted"):
    """Run ``main(*args)`` and exit with its return value; a user error, an
    ``OSError`` (a missing or unwritable file, a full standard output), Ctrl-C or a signal of
    :data:`ENDING` becomes one ``error:`` line; a reader of standard output gone, a quiet exit 141.

    A signal at any moment is its one line and exit 130 (Ctrl-C) or 143 (SIGTERM), whatever it
    leaves behind: an error in cleanup after it (a module whose import it cut short, imported
    again), a C extension's own error, or nothing (lost in a finalizer, whose message is not shown)."""
    try:
        os.getcwd()
    except FileNotFoundError:  # the tools a command starts fail late and obscurely there (oneMKL's fatal error)
        print(error_line("the current folder no longer exists (it was deleted after the shell entered it): cd to "
                         "an existing folder and run the command again"), file=sys.stderr, flush=True)
        sys.exit(1)
    _GUARDED[:] = [os.getpid()]
    _SIGNALLED.clear()
    for sig in ENDING:
        if signal.getsignal(sig) is not signal.SIG_IGN:  # not what nohup ignores (SIGHUP)
            signal.signal(sig, _terminate)
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:  # not where Ctrl-C is ignored (nohup, &)
        signal.signal(signal.SIGINT, _interrupt)
    if sys.stdin is None:
        sys.stdin = _Closed("standard input", "give the input as a file (--input FILE where the command has it) or "
                                              "pipe it in")
    if sys.stdout is None:
        sys.stdout = _Closed("standard output", "the command writes its results and progress there; run it with "
                                                "standard output open (a terminal, a file, a pipe or /dev/null)")
    _name_stdout()
    unraisable = sys.unraisablehook
    sys.unraisablehook = lambda u: None if issubclass(u.exc_type, KeyboardInterrupt) else unraisable(u)
    try:
        status = main(*args)
    except (KeyboardInterrupt, Exception) as exc:  # noqa: BLE001 -- user errors become one line; bugs: traceback
        _exit_on_signal(None)
        if _SIGNALLED or isinstance(exc, KeyboardInterrupt):
            signum = _SIGNALLED[0] if _SIGNALLED else signal.SIGTERM if isinstance(exc, Terminated) else signal.SIGINT
            try:
                print(_interrupted_line(signum, interrupted), file=sys.stderr, flush=True)
            except OSError:  # SIGHUP: the terminal it would go to may be gone
                pass
            sys.exit(128 + signum)
        if _user_error(exc):
            print(error_line(exc), file=sys.stderr, flush=True)
            sys.exit(getattr(exc, "exit_status", 1))
        if isinstance(exc, BrokenPipeError) and _reader_gone():  # `| head -1`: ends quietly, as the shell's tools
            _leave_stdout(128 + signal.SIGPIPE)
        if isinstance(exc, OSError) and exc.filename == STDOUT:  # /dev/full, a full disk
            _leave_stdout(1, error_line(f"writing standard output: {exc.strerror or exc}"))
        if isinstance(exc, OSError):  # a file problem the message names
            print(error_line(exc), file=sys.stderr, flush=True)
            sys.exit(1)
        raise
    failure = _stdout_failure()  # what is still buffered, written now: a reader gone, a full disk
    if failure is not None:
        if isinstance(failure, BrokenPipeError) and _reader_gone():
            _leave_stdout(128 + signal.SIGPIPE)
        _leave_stdout(1, error_line(f"writing standard output: {failure.strerror or failure}"))
    _exit_on_signal(None if _SIGNALLED else interrupted)
    if _SIGNALLED:  # received, then lost on the way: the command did not stop when asked
        print(_interrupted_line(_SIGNALLED[0], interrupted), file=sys.stderr, flush=True)
        sys.exit(128 + _SIGNALLED[0])
    sys.exit(status or 0)


def log(message: str, stream=None):
    """A progress line with the time: ``[12:34:56] message`` (stdout unless ``stream``)."""
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=stream or sys.stdout, flush=True)


def partial_path(path) -> Path:
    """The temporary name :func:`atomic_output` writes ``path`` under."""
    path = Path(path)
    return path.with_name(path.name + ".partial")


def _remove(path: Path):
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    elif path.exists() or path.is_symlink():
        path.unlink()


NO_SPACE = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)  # a full disk, a quota, a file-size limit (ulimit -f)


@contextmanager
def atomic_output(path):
    """Yield a temporary path (a file or a folder the block creates); move it to
    ``path`` only if the block completes, replacing what was there; remove it otherwise.
    A full disk (or quota) while the block writes becomes a :class:`UserError` naming ``path``."""
    path = Path(path)
    tmp = partial_path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    _remove(tmp)
    try:
        yield tmp
    except OSError as exc:
        _remove(tmp)
        if exc.errno in NO_SPACE:
            limit = exc.errno == errno.EFBIG
            raise UserError(f"{'a file-size limit (ulimit -f) stopped it' if limit else 'no space left on the device'}"
                            f" to write {path} ({exc.strerror}); nothing was written: "
                            f"{'raise the limit' if limit else 'free some space'} and run the same command again") from None
        raise
    except BaseException:
        _remove(tmp)
        raise
    if path.is_dir() and not path.is_symlink():
        if not tmp.is_dir():  # never replace a folder (and all it holds) with a file
            _remove(tmp)
            raise UserError(f"{path} is a folder; nothing was written (give a file path)")
        shutil.rmtree(path)
    os.replace(tmp, path)


def check_output(path, option: str = "--output", force: bool = False, folder: bool = False,
                 inputs: Sequence = ()) -> Path:
    """Check, before any work starts, that ``path`` can be written by a command: its folder exists and
    takes new files, it is not a folder (unless ``folder``: the command writes a folder there), it is
    none of the command's ``inputs`` and holds none of them (writing it would replace what the command
    reads, --force or not), and nothing is there yet unless ``force`` (the command's ``--force``). A
    :class:`UsageError` naming ``option`` otherwise. The command then writes it with :func:`atomic_output`."""
    path = Path(path)
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        what = "is a file, not a folder" if parent.exists() else "does not exist"
        raise UsageError(f"{option} {path}: the folder {parent} {what}")
    if path.is_dir() and not folder:
        raise UsageError(f"{option} {path} is a folder; give a file path (nothing in the folder is touched)")
    if folder and path.exists() and not path.is_dir():
        raise UsageError(f"{option} {path} is a file; give a folder (the file is not touched)")
    target = path.resolve()
    for source in inputs:
        if source is not None and (Path(source).resolve() == target or target in Path(source).resolve().parents):
            what = "is" if Path(source).resolve() == target else "holds"
            raise UsageError(f"{option} {path} {what} {source}, which this command reads: writing it would "
                             "replace what is being read (--force or not); give another path")
    if (path.exists() or path.is_symlink()) and not force:
        kind = "folder" if path.is_dir() else "file"
        raise UsageError(f"{option} {path}: the {kind} exists; pass --force to replace it, or choose another path")
    try:  # a real probe: os.access says yes to root on read-only or virtual file systems (/proc)
        import tempfile

        with tempfile.NamedTemporaryFile(dir=parent, prefix=f".{path.name}.", suffix=".probe"):
            pass
    except OSError as exc:
        raise UsageError(f"{option} {path}: cannot write in {parent} ({exc.strerror or exc})") from None
    return path


def add_output_option(parser, help: str, *short: str, dest: str = "out", out_too: bool = True, **kwargs):
    """``--output`` (and ``short``, e.g. -o), the kit's one name for the file a command writes (``args.out``
    unless ``dest``); with ``out_too``, ``--out``, the name the commands on record had, still works, out of
    --help. (Then not ``required``: argparse would ask for --output where --out was given; a command
    checks ``args.out`` itself.)"""
    parser.add_argument(*short, "--output", dest=dest, type=Path, help=help, **kwargs)
    if out_too:
        parser.add_argument("--out", dest=dest, type=Path, help=argparse.SUPPRESS)


def add_force_option(parser, what: str = "the output"):
    """``--force``: the one way to let a command replace an existing output (:func:`check_output`)."""
    parser.add_argument("--force", action="store_true", help=f"replace {what} if it exists (default: refuse)")


def add_ignore_changed_option(parser):
    """``--ignore-changed-files`` of the commands that load a run's model: use a run whose dictionaries or
    BPE files changed since it made them (attn_plugin.run_cards refuses it by default, naming this option)."""
    parser.add_argument("--ignore-changed-files", action="store_true",
                        help="use the run even where its dictionaries or BPE files changed since the run made "
                             "them (default: refused in one line: the model's token ids would stand for other words)")


def write_text_atomic(path, text: str):
    with atomic_output(path) as tmp:
        Path(tmp).write_text(text, encoding="utf-8")


def write_json_atomic(path, data):
    write_text_atomic(path, json.dumps(data, indent=2) + "\n")


def read_json(path, what: str = "file") -> dict:
    """A JSON file, or a UserError naming it."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UserError(f"{what} not found: {path}") from None
    except (OSError, ValueError) as exc:
        raise UserError(f"cannot read {what} {path}: {exc}") from None

"""What every `planner` command shares: a PlannerError becomes one `error:` line on stderr and exit
code 2; Ctrl-C exits with 130 and says that nothing was written."""
from __future__ import annotations

import re

import click

from costmodels.errors import PlannerError


MAX_ERROR_CHARS = 1000     # an error echoes the input it refuses; a 3 MiB name must not become a 3 MiB line


class CLIError(click.ClickException):
    exit_code = 2

    def show(self, file=None):
        text = escaped(self.format_message())
        if len(text) > MAX_ERROR_CHARS:
            text = f"{text[:MAX_ERROR_CHARS - 220]} [... {len(text) - MAX_ERROR_CHARS + 20:,} characters ...] " \
                   f"{text[-200:]}"
        click.echo(f"error: {text}", err=True)


class Interrupted(CLIError):
    """Ctrl-C / SIGINT: the conventional exit status 128 + 2."""
    exit_code = 130


def escaped(text: str) -> str:
    """One line a terminal shows as it is: a newline, an escape sequence or another non-printable
    character (a value read from a file may hold any) is written as its Python escape (\\n, \\x1b)."""
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in str(text))


def run_command(fn, *args, **kwargs):
    """Call `fn`; a PlannerError becomes a CLIError (shown on one line, whatever its values hold: a
    newline inside a file's value must not cut off the fix the message ends with), Ctrl-C an
    Interrupted."""
    try:
        return fn(*args, **kwargs)
    except PlannerError as exc:
        raise CLIError(str(exc) if str(exc) else exc.__class__.__name__) from None
    except KeyboardInterrupt:
        raise Interrupted("interrupted; nothing was written") from None
    except OSError as exc:
        # what the file system refuses (a name too long, a folder that vanished) where no check of ours
        # ran first: one line naming the path and the reason
        raise CLIError(os_error_text(exc)) from None
    except Exception as exc:
        if _caused_by_interrupt(exc):
            # Ctrl-C inside an import: Python wraps it (a class body's __set_name__ raising KeyboardInterrupt
            # becomes a RuntimeError, matplotlib.ticker while report figures load)
            raise Interrupted("interrupted; nothing was written") from None
        raise


def _caused_by_interrupt(exc: BaseException) -> bool:
    seen = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, KeyboardInterrupt):
            return True
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return False


def os_error_text(exc: OSError) -> str:
    where = f"'{str(exc.filename)[:80]}{'...' if len(str(exc.filename)) > 80 else ''}': " if exc.filename else ""
    return f"{where}{exc.strerror or exc.__class__.__name__}; nothing was written"


_ASCII_INT = re.compile(r"[+-]?[0-9]+")
# (inf and nan pass, for the option's own range check to name)
_ASCII_FLOAT = re.compile(r"[+-]?(([0-9]+(?:\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+)?|inf|infinity|nan)", re.IGNORECASE)


class AsciiInt(click.ParamType):
    """A whole-number option in ASCII digits: click's INT takes what int() takes, '1_6' (16) and other
    scripts' digits ('８') among them, which the plain numbers of files refuse."""
    name = "integer"

    def convert(self, value, param, ctx):
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        text = str(value).strip()
        if not _ASCII_INT.fullmatch(text):
            self.fail(f"{text[:40]!r} is not a whole number in ASCII digits (e.g. 8)", param, ctx)
        if len(text.lstrip("+-")) > 100:       # beyond any count here; int() refuses 4,300 digits with a traceback
            self.fail(f"{text[:20]}... ({len(text)} characters) is beyond any value this option takes", param, ctx)
        return int(text)


class AsciiFloat(click.ParamType):
    """A number option in ASCII digits (1e9, 2.5), for the same reason as AsciiInt."""
    name = "float"

    def convert(self, value, param, ctx):
        if isinstance(value, float) or (isinstance(value, int) and not isinstance(value, bool)):
            return float(value)
        text = str(value).strip()
        if not _ASCII_FLOAT.fullmatch(text):
            self.fail(f"{text!r} is not a number in ASCII digits (e.g. 2e12)", param, ctx)
        return float(text)


ASCII_INT = AsciiInt()
ASCII_FLOAT = AsciiFloat()

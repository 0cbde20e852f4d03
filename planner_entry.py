"""The `planner` console script's first code. Loading the command line (the `planner` package with
click, numpy and OR-Tools) takes a fraction of a second; this module imports none of it at the top, so
that a Ctrl-C in that time ends as one during a command does: one line, exit code 130, no traceback.
It sits outside the package because importing anything inside `planner` runs planner/__init__.py, which
loads the API."""
import sys


def _tolerant_streams():
    """A terminal whose encoding cannot show a character (a model named in Cyrillic under LANG=C or
    PYTHONIOENCODING=latin-1) gets it escaped, not a UnicodeEncodeError traceback after the work."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.reconfigure(errors="backslashreplace")
        except (AttributeError, ValueError, OSError):
            pass


def main():
    _tolerant_streams()
    try:
        from planner.cli import main as cli
    except KeyboardInterrupt:
        sys.stderr.write("error: interrupted; nothing was written\n")
        raise SystemExit(130) from None
    try:
        return cli()
    except OSError as exc:
        # writing the output failed (a full disk, a closed stream; click handles a broken pipe itself)
        try:
            sys.stderr.write(f"error: cannot write the output: {exc.strerror or exc}\n")
        except OSError:
            pass
        raise SystemExit(2) from None

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


def _closed_streams():
    """A closed stdout (`>&-`) would drop the result silently and a closed stderr the error line: the
    run still ends with exit code 2, and says why where it can."""
    import io
    import os
    writes_files = any(a == "--out" or a.startswith("--out=") for a in sys.argv[1:])
    if sys.stdout is None and not writes_files:
        if sys.stderr is not None:
            sys.stderr.write("error: standard output is closed, so the result has nowhere to go; redirect it "
                             "(> plan.txt, or > /dev/null with --out DIR)\n")
        raise SystemExit(2)
    def devnull():
        return io.TextIOWrapper(open(os.devnull, "wb"), errors="backslashreplace")

    sys.stdout = sys.stdout or devnull()   # with --out, what would be printed is not wanted
    sys.stderr = sys.stderr or devnull()


def main():
    _closed_streams()
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
    finally:
        # the command is done (its files whole, its result or error printed): a Ctrl-C now would only
        # kill the interpreter's shutdown by the signal, with nothing said. Ignored, not caught by a
        # handler that does nothing: Python puts its handlers back to the default while it shuts down.
        # (An ignored signal stays ignored in a process started from this one: none is, after this.)
        import signal
        signal.signal(signal.SIGINT, signal.SIG_IGN)

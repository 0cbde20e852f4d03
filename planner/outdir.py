"""Where results are written: the checks on an --out directory, and the default Optuna storage files
(next to --out, or in the user's cache directory)."""
from __future__ import annotations

import errno
import os
import re
import tempfile
from pathlib import Path

from costmodels.errors import SpecError


# 255 bytes per file name, less '.optuna.db-journal' (18), the longest name written beside an --out
MAX_OUT_NAME = 255 - len(".optuna.db-journal")


def _resolved(out, kind: str) -> tuple[Path, Path]:
    """(path, resolved path) of an --out, after the checks every output shares: a name, no NUL, a
    file name within the 255-byte limit, not a dangling symbolic link."""
    if out is None or not str(out).strip():
        raise SpecError(f"--out needs a {kind} name, got an empty string")
    if "\0" in str(out):
        raise SpecError("--out contains a NUL character")
    if any("\udc80" <= c <= "\udcff" for c in str(out)):     # os.fsdecode's escapes of undecodable bytes
        shown = os.fsencode(str(out))[:60].decode("utf-8", "backslashreplace")
        raise SpecError(f"--out '{shown}' is not UTF-8 text (a byte such as 0xff from another encoding); "
                        "give a name in UTF-8")
    if any(not c.isprintable() for c in str(out)):
        raise SpecError(f"--out {str(out)[:60]!r} contains a control character (a newline, a tab, an escape); "
                        "give a name of printable characters")
    p = Path(out)
    if len(os.fsencode(p.name)) > MAX_OUT_NAME:
        raise SpecError(f"--out: the name {p.name[:40]}... is {len(os.fsencode(p.name))} bytes long; "
                        f"use at most {MAX_OUT_NAME} (file names are limited to 255 bytes, and the default "
                        "study file beside it adds '.optuna.db-journal')")
    if p.is_symlink() and not p.exists():
        raise SpecError(f"--out {out} is a dangling symbolic link")
    try:
        return p, p.resolve()
    except RuntimeError:
        raise SpecError(f"--out {out}: the path runs through a loop of symbolic links; give another path") from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise SpecError(f"--out {out}: the path runs through a loop of symbolic links; give another path") from None
        raise SpecError(f"--out {out}: cannot resolve the path ({exc.strerror or exc.__class__.__name__})") from None


def _check_parent(out, resolved: Path) -> None:
    parent = resolved.parent
    if not parent.exists():
        raise SpecError(f"--out {out}: parent directory {parent} does not exist")
    if not parent.is_dir():
        raise SpecError(f"--out {out}: {parent} is not a directory")
    if not os.access(parent, os.W_OK) or parent.parts[1:2] in (("proc",), ("sys",)):
        raise SpecError(f"--out {out}: cannot write in {parent}")


def check_out_dir(out, force: bool, inputs=()) -> None:
    """Refuse an existing output without --force, a location that cannot be written, and any output
    whose replacement would destroy something else: the working directory or one of its parents,
    the root, or a directory holding one of the inputs (`inputs`: paths read by this run)."""
    p, resolved = _resolved(out, "directory")
    if p.name in ("", ".", "..") or str(out).rstrip("/").endswith(("/.", "/..")):
        raise SpecError(f"--out {out} names the current or a parent directory; give a new directory name")
    try:
        cwd = Path.cwd().resolve()
    except (OSError, RuntimeError) as exc:
        raise SpecError(f"--out {out}: cannot resolve the path ({exc.__class__.__name__})") from None
    if resolved == cwd or resolved in cwd.parents or resolved == Path(resolved.anchor):
        raise SpecError(f"--out {out} is the working directory or one of its parents; give a new directory name")
    for ref in inputs:
        try:
            src = Path(ref).resolve()
        except (OSError, RuntimeError, TypeError, ValueError):
            continue
        if src == resolved or resolved in src.parents:
            raise SpecError(f"--out {out} holds the input '{ref}'; write the output somewhere else")
    if p.exists() and not p.is_dir():
        raise SpecError(f"--out {out} exists and is not a directory")
    if p.exists() and not force:
        raise SpecError(f"--out {out} already exists; pass --force to replace it")
    if p.exists():
        foreign = _not_written_by_planner(resolved)
        if foreign:
            raise SpecError(f"--out {out} {foreign}; --force replaces only an earlier plan or report (or an empty "
                            "directory): move what is yours, or give a new name")
    _check_parent(out, resolved)


# Everything `planner plan` (planner/emit) and `planner explain` (a report directory) write at the top of
# an --out, and what probe/ holds before the probe has run.
PLANNER_FILES = frozenset({"plan.json", "report.md", "launch.sh", "hostfile", ".deepspeed_env", "ds_config.json",
                           "probe.sh", "memory.png", "time.png", "layouts.png", "tradeoff.png"})
PLANNER_MARKERS = ("plan.json", "report.md")
_PROBE_FILE = re.compile(r"^(ds_config_\d+\.json|\.deepspeed_env)$")


def _not_written_by_planner(directory: Path) -> str:
    """'' for an empty directory or one the planner wrote (so --force may replace it, with everything in
    it); else the first entry it did not write, or what is missing. A home, a data set, a link's target
    or a directory holding a probe's logs (measurements) is never deleted."""
    try:
        entries = {e.name: e for e in os.scandir(directory)}
        if not entries:
            return ""
        for name, entry in sorted(entries.items()):
            if name == "probe" and entry.is_dir(follow_symlinks=False):
                for sub in sorted(os.scandir(entry.path), key=lambda e: e.name):
                    if not (_PROBE_FILE.match(sub.name) and sub.is_file(follow_symlinks=False)):
                        return f"holds 'probe/{sub.name}', which the planner did not write"
            elif name not in PLANNER_FILES or not entry.is_file(follow_symlinks=False):
                return f"holds '{name}', which the planner did not write"
    except OSError as exc:
        raise SpecError(f"--out {directory}: cannot read it ({exc.strerror or exc.__class__.__name__})") from None
    if not any(m in entries for m in PLANNER_MARKERS):
        return f"has no {' or '.join(PLANNER_MARKERS)}, so it is not an earlier plan or report"
    for marker in PLANNER_MARKERS:
        if marker in entries and not _written_by_planner(directory / marker):
            return f"holds a {marker} the planner did not write (its content is not a plan's or report's)"
    return ""


PLAN_KEYS = frozenset({"version", "inputs", "layout", "estimate"})
REPORT_HEADER = b"# Training plan: "          # the first line planner/report.py render_report writes


def _written_by_planner(path: Path) -> bool:
    """Whether plan.json / report.md holds what the planner writes: a JSON object with a plan's keys,
    or a report that starts with the planner's header (a name alone is not enough for --force)."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(64 << 20)
    except OSError:
        return False
    if path.name == "report.md":
        return head.startswith(REPORT_HEADER)
    import json
    try:
        data = json.loads(head)
    except (ValueError, RecursionError):
        return False
    return isinstance(data, dict) and PLAN_KEYS <= set(data)


def current_umask() -> int:
    """The process's umask (read by setting it and putting it back)."""
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_out_file(out, text: str, force: bool, inputs=(), ours=None, kind: str = "output") -> None:
    """Write one output file (calib.yaml) atomically: refuse a directory, a missing parent, one of
    this run's inputs (even with --force), anything that is not a regular file (a device, a FIFO),
    an existing file without --force, and, with --force, a file `ours(path)` does not recognise as
    one this command wrote (so --force replaces an old calib.yaml, not a model file given by
    mistake); write a temporary file beside it and rename it over the target, so a failure or Ctrl-C
    leaves the old file whole. The file gets the mode a plain write would (the old file's, or 0666
    less the umask)."""
    p, resolved = _resolved(out, "file")
    for ref in inputs:
        try:
            same = Path(ref).resolve() == resolved
        except (OSError, RuntimeError, TypeError, ValueError):
            continue
        if same:
            raise SpecError(f"--out {out} is the input '{ref}'; write the calibration to another file")
    if p.is_dir() or str(out).endswith(("/", os.sep)):
        raise SpecError(f"--out {out} is a directory; give a file name such as {p / 'calib.yaml'}")
    if p.exists() and not p.is_file():
        raise SpecError(f"--out {out} exists and is not a regular file; give a new file name")
    if p.exists() and ours is not None and not ours(resolved):
        raise SpecError(f"--out {out} already exists and is not a {kind} this command wrote, so even --force "
                        "does not replace it; give a new file name or remove it first")
    if p.exists() and not force:
        raise SpecError(f"--out {out} already exists; pass --force to replace it")
    _check_parent(out, resolved)
    mode = resolved.stat().st_mode & 0o777 if resolved.exists() else 0o666 & ~current_umask()
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name[:100]}.", suffix=".tmp", dir=resolved.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.chmod(tmp, mode)
        os.replace(tmp, resolved)
    except BaseException as exc:           # OSError, or Ctrl-C between the write and the rename
        Path(tmp).unlink(missing_ok=True)
        if isinstance(exc, OSError):
            raise SpecError(f"--out {out}: cannot write it ({exc.strerror or exc.__class__.__name__})") from None
        raise


def default_storage(out) -> str:
    """SQLite file next to the output directory (not inside: the directory is replaced atomically)."""
    from .study import sqlite_url
    p = Path(out).resolve()
    return sqlite_url(p.parent / (p.name + ".optuna.db"))


def cache_storage() -> str:
    """SQLite file in the user's cache directory, for searches without --out (so they resume too)."""
    xdg = os.environ.get("XDG_CACHE_HOME") or ""
    if Path(xdg).is_absolute():             # the XDG base directory spec ignores a relative path
        base = Path(xdg) / "llm-train-planner"
    else:
        home = Path.home()
        if not home.is_dir():
            raise SpecError(f"the home directory {home} does not exist, so there is no study cache; set "
                            "XDG_CACHE_HOME to a writable directory, or give --storage or --out")
        base = home / ".cache" / "llm-train-planner"
    try:
        base.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise SpecError(f"cannot create the study cache {base} ({exc.strerror or exc}); set XDG_CACHE_HOME to a "
                        "writable directory, or give --storage or --out") from None
    from .study import sqlite_url
    return sqlite_url(base / "studies.db")

"""Render and write a plan's files atomically: a temporary directory renamed into place.

Target-neutral: the job files come from the emitter the framework profile names (targets.py); the
writer adds plan.json, report.md and its figures, and owns the directory.

An existing output directory is left untouched unless `force`; an interrupted run leaves either the
old directory or the complete new one (the swap is one rename; Linux renameat2 RENAME_EXCHANGE
when replacing). Outputs carry no timestamps and no absolute paths, so they are reproducible.
"""
from __future__ import annotations

import ctypes
import errno
import os
import re
import shutil
import signal
import tempfile
from contextlib import contextmanager
from pathlib import Path

from costmodels.errors import SpecError
from search_spaces.frameworks import PROFILES

from ..serialise import to_json
from .plan_file import PLAN_VERSION
from .targets import emitter_for, probe_unsupported


def render_files(result, launcher: str = "deepspeed", probe: int = 0) -> dict[str, bytes]:
    """Every output file of a plan, name -> bytes (deterministic): the target's job files (its emitter's),
    its probe with `probe` > 0, the figures, plan.json and report.md."""
    from ..serialise import plan_to_dict
    from ..report import render_report, render_figures

    files: dict[str, bytes] = {}
    data = plan_to_dict(result)
    emitter = emitter_for(result.profile)
    if emitter is not None:
        job_files, fields = emitter.render(result, launcher)
        files.update(job_files)
        data.update(fields)
    if probe:
        if emitter is None or emitter.render_probe is None:
            raise SpecError(probe_unsupported(PROFILES.values()))
        probe_files, data["probe"] = emitter.render_probe(result, probe, launcher)
        files.update(probe_files)
    data["version"] = PLAN_VERSION
    figures = render_figures(data, result)
    files.update(figures)
    files["plan.json"] = (to_json(data, default=_default) + "\n").encode()     # strict: no NaN
    files["report.md"] = render_report(data, figures=figures).encode("utf-8", errors="backslashreplace")
    return files


def _default(o):
    import numpy as np

    if isinstance(o, np.generic):
        return o.item()
    if hasattr(o, "value"):
        return o.value
    raise TypeError(type(o).__name__)


# ---- atomic directory replacement --------------------------------------------------------------

_RENAME_NOREPLACE = 1
_RENAME_EXCHANGE = 2


def _renameat2(a: Path, b: Path, flags: int) -> int | None:
    """Linux renameat2: 0 on success, the errno on failure, None where the call is unsupported."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.renameat2
    except (OSError, AttributeError):
        return None
    AT_FDCWD = -100
    res = fn(AT_FDCWD, os.fsencode(str(a)), AT_FDCWD, os.fsencode(str(b)), flags)
    if res == 0:
        return 0
    err = ctypes.get_errno()
    return None if err in (errno.ENOSYS, errno.EINVAL) else err


def _exchange(a: Path, b: Path) -> bool:
    """Atomically swap two paths (Linux renameat2); False where unsupported."""
    return _renameat2(a, b, _RENAME_EXCHANGE) == 0


def _publish_new(tmp: Path, target: Path, out) -> None:
    """Rename `tmp` to `target` only if `target` does not exist, in one step: renameat2 with
    RENAME_NOREPLACE, else rename(2), which refuses to replace a non-empty directory (and `tmp` is
    never empty). Two writers without --force: exactly one wins, the other is told."""
    err = _renameat2(tmp, target, _RENAME_NOREPLACE)
    if err is None:
        try:
            os.rename(tmp, target)
            return
        except OSError as exc:
            err = exc.errno
    if err in (errno.EEXIST, errno.ENOTEMPTY, errno.EISDIR, errno.ENOTDIR):
        raise SpecError(f"--out {out} already exists (written by another run meanwhile); pass --force to replace it")
    if err:
        raise SpecError(f"cannot write --out {out}: {os.strerror(err)}")


_TMP_NAME = re.compile(r"^\.(?P<name>.*)\.(?P<pid>\d+)\.[^.]+\.(tmp|old)$")


def _tmp_prefix(target: Path) -> str:
    # Short enough that the temporary name stays within the 255-byte limit of a file name.
    stem = os.fsencode(target.name)[:64].decode("utf-8", "ignore")
    return f".{stem}.{os.getpid()}."


# Written first into every temporary folder (and into an old job moved aside), removed before a folder
# is published: a leftover folder is deleted only when it holds this file with this text, never for its
# name alone (a user's '.results.2024.backup.old' matches the name pattern).
TMP_MARKER = ".llm-train-planner-tmp"
TMP_MARKER_TEXT = b"temporary folder of llm-train-planner; deleted by its next run once this run is gone\n"


def _mark(folder: Path) -> None:
    (folder / TMP_MARKER).write_bytes(TMP_MARKER_TEXT)


def _is_marked(folder: str) -> bool:
    marker = os.path.join(folder, TMP_MARKER)
    try:
        if os.path.islink(marker) or not os.path.isfile(marker):
            return False
        with open(marker, "rb") as fh:
            return fh.read(len(TMP_MARKER_TEXT) + 1) == TMP_MARKER_TEXT
    except OSError:
        return False


def _clean_stale(parent: Path, target: Path) -> None:
    """Remove temporary folders left by runs that were killed (kill -9) while writing `target`: the
    pid in their name belongs to no living process, and the folder holds the planner's marker file."""
    stem = os.fsencode(target.name)[:64].decode("utf-8", "ignore")
    try:
        entries = list(os.scandir(parent))
    except OSError:
        return
    for entry in entries:
        m = _TMP_NAME.match(entry.name)
        if not m or m.group("name") != stem or not entry.is_dir(follow_symlinks=False):
            continue
        pid = int(m.group("pid"))
        if pid == os.getpid() or _alive(pid) or not _is_marked(entry.path):
            continue
        shutil.rmtree(entry.path, ignore_errors=True)


def _remove_ours(path: Path) -> None:
    """Delete a folder this run made or moved aside (the temporary job, or the old job after --force).
    An old job the user made read-only (0555) is still ours to delete: its own folders (never a link,
    never anything above `path`) are made writable first, or it stayed behind as a hidden .tmp folder
    without the marker that lets a later run clean it."""
    try:
        for top, dirs, _files in os.walk(path):          # os.walk does not follow links to folders
            for d in [top] + [os.path.join(top, name) for name in dirs]:
                if not os.path.islink(d) and (os.stat(d).st_mode & 0o300) != 0o300:   # owner's w and x
                    os.chmod(d, 0o700)
    except OSError:
        pass
    shutil.rmtree(path, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True
    return True


@contextmanager
def _terminate_cleanly():
    """SIGTERM and SIGINT raise SystemExit so temporary files are removed by `finally` blocks."""
    signals = (signal.SIGTERM, signal.SIGINT)
    previous = {s: signal.getsignal(s) for s in signals}

    def handler(signum, frame):
        raise SystemExit(128 + signum)

    try:
        for s in signals:
            signal.signal(s, handler)
    except ValueError:          # not in the main thread
        yield
        return
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


def _write_file(path: Path, content: bytes, mode: int) -> None:
    """One file of the temporary directory, flushed to disk before the directory is published."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as fh:
        fh.write(content)
        fh.flush()
        os.fsync(fh.fileno())
    os.chmod(path, mode)


def write_files(files: dict[str, bytes], out, force: bool = False, modes: dict | None = None,
                inputs=()) -> Path:
    from ..outdir import check_out_dir, current_umask

    check_out_dir(out, force, inputs)
    mask = current_umask()          # the modes a plain write would give: 0666 / 0777 (scripts) less the umask
    target = Path(out)
    parent = target.resolve().parent
    with _terminate_cleanly():
        tmp = None
        try:
            _clean_stale(parent, target)
            tmp = Path(tempfile.mkdtemp(prefix=_tmp_prefix(target), suffix=".tmp", dir=parent))
            _mark(tmp)
            for name, content in sorted(files.items()):
                _write_file(tmp / name, content, (modes or {}).get(name, 0o666) & ~mask)
            (tmp / TMP_MARKER).unlink()                 # the published folder holds only the job
            os.chmod(tmp, 0o777 & ~mask)
            if force and target.exists():
                real = target.resolve()            # through a symbolic link, its target is replaced
                if not _exchange(tmp, real):
                    old = Path(tempfile.mkdtemp(prefix=_tmp_prefix(target), suffix=".old", dir=parent))
                    os.rmdir(old)
                    os.replace(real, old)
                    _mark(old)                          # the old job, moved aside: deleted below
                    os.replace(tmp, real)
                    tmp = old
            else:
                _publish_new(tmp, target, out)
                tmp = None
        except OSError as exc:
            raise SpecError(f"cannot write --out {out}: {exc.strerror or exc}") from None
        finally:
            if tmp is not None and tmp.exists():
                _remove_ours(tmp)
    return target


def write_plan(result, out, force: bool = False, launcher: str = "deepspeed", inputs=(), probe: int = 0) -> Path:
    files = render_files(result, launcher, probe=probe)
    return write_files(files, out, force=force, modes={n: 0o777 for n in files if n.endswith(".sh")}, inputs=inputs)


def write_report_dir(data: dict, out, force: bool = False, inputs=()) -> Path:
    from ..report import render_figures, render_report

    figures = render_figures(data, None)
    files = dict(figures)
    files["report.md"] = render_report(data, figures=figures).encode("utf-8", errors="backslashreplace")
    return write_files(files, out, force=force, inputs=inputs)

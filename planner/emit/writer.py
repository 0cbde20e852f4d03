"""Render and write a plan's files atomically: a temporary directory renamed into place.

An existing output directory is left untouched unless `force`; an interrupted run leaves either the
old directory or the complete new one (the swap is one rename; Linux renameat2 RENAME_EXCHANGE
when replacing). Outputs carry no timestamps and no absolute paths, so they are reproducible.
"""
from __future__ import annotations

import ctypes
import errno
import json
import os
import re
import shlex
import shutil
import signal
import tempfile
from contextlib import contextmanager
from pathlib import Path

from costmodels.errors import SpecError
from costmodels.units import fmt_bytes, fmt_seconds

from ..text import layout_line
from .megatron_ds import (DEEPSPEED_REQUIREMENT, DEEPSPEED_TESTED, MEGATRON_DEEPSPEED_COMMIT, PROBE_ITERS, Job,
                          build_job, lr_schedule, probe_job)

# Variables launch.sh defines itself; an argument that is exactly "$NAME" of one of these is left for
# the shell to expand (double-quoted). Every other value is quoted by shlex.quote.
SCRIPT_VARIABLES = frozenset({"DATA_PATH", "CHECKPOINT_PATH", "TOKENIZER_MODEL", "VOCAB_FILE", "MERGE_FILE",
                              "DS_CONFIG", "MEGATRON_DS_DIR", "MASTER_ADDR", "MASTER_PORT"})
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def shell_word(arg) -> str:
    """The one quoting function for every value that reaches a generated script: one shell word
    that the shell reads back as exactly `arg`. NUL cannot be part of a shell word: refused."""
    arg = str(arg)
    if "\0" in arg:
        raise SpecError(f"value {arg!r} contains a NUL character, which no shell script can carry")
    if arg.startswith("$") and arg[1:] in SCRIPT_VARIABLES:
        return f'"{arg}"'
    return shlex.quote(arg)


def comment_text(text) -> str:
    """Text safe inside a `#` comment: one line, no control characters (a newline would end the
    comment and run the rest as a command). Control and other non-printable characters become `?`."""
    text = str(text)
    if "\0" in text:
        raise SpecError(f"value {text!r} contains a NUL character, which no shell script can carry")
    return "".join(c if c.isprintable() else "?" for c in text)


def env_assignment(key: str, value) -> str:
    """KEY=VALUE for `export` in launch.sh (value quoted) and for .deepspeed_env (checked)."""
    if not _ENV_NAME.match(str(key)):
        raise SpecError(f"environment variable name {key!r} is not a valid shell name")
    return f"{key}={shell_word(value)}"


def args_block(argv) -> str:
    """One flag and its values per line inside a bash array."""
    lines, current = [], []
    for a in argv:
        if a.startswith("--") and current:
            lines.append("  " + " ".join(shell_word(x) for x in current))
            current = []
        current.append(a)
    if current:
        lines.append("  " + " ".join(shell_word(x) for x in current))
    return "\n".join(lines)


def parse_args_block(text: str) -> list[str]:
    """Inverse of args_block for launch.sh (used by tests and `planner estimate launch.sh`)."""
    return _parse_block(text.split("ARGS=(\n", 1)[1].split("\n)\n", 1)[0])


def parse_probe_blocks(text: str) -> list[list[str]]:
    """Every candidate's argument list of probe.sh, in order (the inverse of its ARGS blocks)."""
    return [_parse_block(part.split("\n)\n", 1)[0]) for part in text.split("ARGS=(\n")[1:]]


def _parse_block(block: str) -> list[str]:
    out = []
    for line in block.splitlines():
        out += [w for w in shlex.split(line, posix=True)]
    return [("$" + w[1:]) if w.startswith("$") else w for w in out]


def _launcher(launcher: str) -> str:
    if launcher not in LAUNCHERS:
        raise SpecError(f"launcher must be one of {', '.join(LAUNCHERS)}, got {launcher!r}")
    return launcher


LAUNCHERS = ("deepspeed", "torchrun")


def deepspeed_env(env: dict) -> str:
    """.deepspeed_env: KEY=VALUE lines that DeepSpeed's launcher passes to every node through the shell
    (pdsh `export KEY=VALUE`), so only values the shell reads unchanged without quoting are allowed."""
    lines = []
    for k, v in sorted(env.items()):
        line = env_assignment(k, v)
        if line != f"{k}={v}":
            raise SpecError(f"environment value {v!r} for {k} cannot be passed through .deepspeed_env")
        lines.append(line + "\n")
    return "".join(lines)


def _nodes(cluster) -> tuple[int, int]:
    """(nodes, GPUs per node) of the job."""
    return max(1, -(-cluster.num_gpus // cluster.gpus_per_node)), min(cluster.gpus_per_node, cluster.num_gpus)


def _settings_block(argv, launcher: str, nodes: int, gpn: int, checkpoint: bool) -> str:
    """The 'fill these in' paths and the node shape, shared by launch.sh and probe.sh."""
    lines = ["# ---- fill these in -------------------------------------------------------------------------",
             "MEGATRON_DS_DIR=${MEGATRON_DS_DIR:-/path/to/Megatron-DeepSpeed}",
             "DATA_PATH=${DATA_PATH:-/path/to/dataset_text_document}"]
    if checkpoint:
        lines.append("CHECKPOINT_PATH=${CHECKPOINT_PATH:-/path/to/checkpoints}")
    if "$TOKENIZER_MODEL" in argv:
        lines.append('TOKENIZER_MODEL=${TOKENIZER_MODEL:-/path/to/tokenizer}      # tokenizer.model or HF tokenizer dir')
    if "$VOCAB_FILE" in argv:
        lines.append('VOCAB_FILE=${VOCAB_FILE:-/path/to/gpt2-vocab.json}')
        lines.append('MERGE_FILE=${MERGE_FILE:-/path/to/gpt2-merges.txt}')
    lines += ["MASTER_ADDR=${MASTER_ADDR:-localhost}", "MASTER_PORT=${MASTER_PORT:-29500}",
              f"LAUNCHER=${{LAUNCHER:-{_launcher(launcher)}}}",
              "# ---------------------------------------------------------------------------------------------",
              f"NODES={int(nodes)}", f"GPUS_PER_NODE={int(gpn)}"]
    return "\n".join(lines)


def _deepspeed_launch(nodes: int) -> str:
    """The deepspeed launcher's command words."""
    words = ["deepspeed"]
    if nodes > 1:
        words += ['--hostfile "$SCRIPT_DIR/hostfile"', '--num_nodes "$NODES"']
    return " ".join(words + ['--num_gpus "$GPUS_PER_NODE"', '--master_port "$MASTER_PORT"'])


def launch_script(result, job: Job, launcher: str) -> str:
    best = result.best
    l, e, m, c = best.layout, best.estimate, result.model, result.cluster
    nodes, gpn = _nodes(c)
    env_lines = "".join(f"export {env_assignment(k, v)}\n" for k, v in sorted(job.env.items()))
    te_note = ", transformer-engine<1.0 (fp8)" if "transformer_engine" in job.argv else ""
    return f"""#!/bin/bash
# Generated by llm-train-planner for {comment_text(m.name)} on {c.num_gpus} x {comment_text(c.gpu.name)} ({nodes} node(s) of {gpn}).
# Layout: {comment_text(layout_line(l))}
# Predicted: {fmt_seconds(e.step_time_s)} per step, {e.tokens_per_s_per_gpu:,.0f} tokens/s/GPU, MFU {e.mfu * 100:.1f}%,
#            {fmt_bytes(e.memory.total)} of {fmt_bytes(e.hbm_bytes)} per GPU. See report.md.
#
# Needs microsoft/Megatron-DeepSpeed at commit {MEGATRON_DEEPSPEED_COMMIT[:8]} (2024-10-18; later commits break
# grouped-query attention and rotary embeddings), {DEEPSPEED_REQUIREMENT} (tested {DEEPSPEED_TESTED};
# 0.19 removed deepspeed.compression, which megatron/training.py imports), NVIDIA apex with its
# CUDA extensions, flash-attn 2.x and einops, transformers and sentencepiece{te_note}:
#   git -C "$MEGATRON_DS_DIR" checkout {MEGATRON_DEEPSPEED_COMMIT[:8]}
#   pip install "deepspeed=={DEEPSPEED_TESTED}" "flash-attn>=2,<3" einops transformers sentencepiece
# Usage: edit the paths below (or export them), then run this script on the first node.
#        LAUNCHER=torchrun runs it with torchrun instead: run it on every node with NODE_RANK set
#        and MASTER_ADDR set to the first node's address.
set -euo pipefail

{_settings_block(job.argv, launcher, nodes, gpn, checkpoint=True)}
SCRIPT_DIR="$(cd "$(dirname "${{BASH_SOURCE[0]}}")" && pwd)"
DS_CONFIG="$SCRIPT_DIR/ds_config.json"
cd "$SCRIPT_DIR"   # the deepspeed launcher reads .deepspeed_env from here
{env_lines}
ARGS=(
{args_block(job.argv)}
)

if [ "$LAUNCHER" = torchrun ]; then
  exec torchrun --nproc_per_node "$GPUS_PER_NODE" --nnodes "$NODES" --node_rank "${{NODE_RANK:-0}}" \\
    --master_addr "$MASTER_ADDR" --master_port "$MASTER_PORT" \\
    "$MEGATRON_DS_DIR/pretrain_gpt.py" "${{ARGS[@]}}"
else
  exec {_deepspeed_launch(nodes)} \\
    "$MEGATRON_DS_DIR/pretrain_gpt.py" "${{ARGS[@]}}"
fi
"""


def hostfile(result) -> str:
    nodes, gpn = _nodes(result.cluster)
    lines = ["# one line per node: hostname slots=GPUS (replace node-N with your hosts)"]
    lines += [f"node-{i} slots={int(gpn)}" for i in range(int(nodes))]
    return "\n".join(lines) + "\n"


def render_scripts(result, launcher: str = "deepspeed"):
    """The Megatron-DeepSpeed job's shell-facing files (launch.sh, hostfile, .deepspeed_env) and the job."""
    job = build_job(result.model, result.best.layout, result.request.total_tokens)
    files = {"launch.sh": launch_script(result, job, launcher).encode()}
    nodes = max(1, -(-result.cluster.num_gpus // result.cluster.gpus_per_node))
    if nodes > 1:
        files["hostfile"] = hostfile(result).encode()
        if job.env:
            files[".deepspeed_env"] = deepspeed_env(job.env).encode()
    return files, job


def probe_jobs(result, k: int) -> list[tuple]:
    """(plan, job) of the top `k` candidates (best first) for probe.sh."""
    return [(p, probe_job(result.model, p.layout)) for p in result.plans[:max(0, int(k))]]


def probe_script(result, jobs, launcher: str) -> str:
    """probe.sh: each candidate for PROBE_ITERS steps with the launch machinery of launch.sh, its log in
    probe/<rank>.log and its DeepSpeed JSON in probe/ds_config_<rank>.json. A failing candidate (out of
    memory, say) is reported and the next one runs; the exit status counts the failures."""
    c, m = result.cluster, result.model
    nodes, gpn = _nodes(c)
    argv_all = [a for _, job in jobs for a in job.argv]
    listing = "\n".join(f"#   {int(p.rank)}: {comment_text(layout_line(p.layout))}; predicted "
                         f"{fmt_seconds(p.estimate.step_time_s)} per step, {fmt_bytes(p.estimate.memory.total)} per GPU"
                         for p, _ in jobs)
    blocks = []
    for p, job in jobs:
        r = int(p.rank)
        exports = "".join(f"  export {env_assignment(k, v)}\n" for k, v in sorted(job.env.items()))
        blocks.append(f"""# ---- candidate {r}: {comment_text(layout_line(p.layout))}
DS_CONFIG="$SCRIPT_DIR/probe/ds_config_{r}.json"
ARGS=(
{args_block(job.argv)}
)
(
{exports}  run_candidate {r} "${{ARGS[@]}}"
) || FAILED=$((FAILED + 1))
""")
    return f"""#!/bin/bash
# Probe generated by llm-train-planner for {comment_text(m.name)} on {c.num_gpus} x {comment_text(c.gpu.name)} ({nodes} node(s) of {gpn}).
# Runs each of the top {len(jobs)} candidates of plan.json for {PROBE_ITERS} iterations, one after the other, with
# Megatron-DeepSpeed's per-iteration log (--log-interval 1), its timers (--timing-log-level 2) and its
# memory report, and no checkpoint; the log of candidate RANK goes to probe/RANK.log. Then:
#   planner calibrate probe/*.log --plan plan.json --out calib.yaml
# Candidates (rank: layout):
{listing}
#
# Same requirements and launcher as launch.sh (Megatron-DeepSpeed {MEGATRON_DEEPSPEED_COMMIT[:8]}, {DEEPSPEED_REQUIREMENT}).
set -uo pipefail

{_settings_block(argv_all, launcher, nodes, gpn, checkpoint=False)}
SCRIPT_DIR="$(cd "$(dirname "${{BASH_SOURCE[0]}}")" && pwd)"
mkdir -p "$SCRIPT_DIR/probe"
cd "$SCRIPT_DIR/probe"   # the deepspeed launcher reads probe/.deepspeed_env from here
FAILED=0

run_candidate() {{   # RANK ARGS...: one candidate, its output in probe/RANK.log
  local rank=$1
  shift
  local log="$SCRIPT_DIR/probe/$rank.log"
  echo "probe: candidate $rank -> $log"
  if [ "$LAUNCHER" = torchrun ]; then
    torchrun --nproc_per_node "$GPUS_PER_NODE" --nnodes "$NODES" --node_rank "${{NODE_RANK:-0}}" \\
      --master_addr "$MASTER_ADDR" --master_port "$MASTER_PORT" \\
      "$MEGATRON_DS_DIR/pretrain_gpt.py" "$@" >"$log" 2>&1
  else
    {_deepspeed_launch(nodes)} \\
      "$MEGATRON_DS_DIR/pretrain_gpt.py" "$@" >"$log" 2>&1
  fi
  local rc=$?
  [ "$rc" -eq 0 ] || echo "probe: candidate $rank failed with exit code $rc (see $log)"
  return "$rc"
}}

{chr(10).join(blocks)}
echo "probe: $FAILED of {len(jobs)} candidate(s) failed"
exit "$FAILED"
"""


def render_probe(result, k: int, launcher: str = "deepspeed") -> tuple[dict, dict]:
    """probe.sh, probe/ds_config_<rank>.json (and probe/.deepspeed_env on several nodes: the union of the
    candidates' variables), and the plan.json record of the probe."""
    jobs = probe_jobs(result, k)
    files = {"probe.sh": probe_script(result, jobs, launcher).encode()}
    for p, job in jobs:
        files[f"probe/ds_config_{int(p.rank)}.json"] = (json.dumps(job.ds_config, indent=2, sort_keys=True)
                                                        + "\n").encode()
    nodes = max(1, -(-result.cluster.num_gpus // result.cluster.gpus_per_node))
    env = {k2: v for _, job in jobs for k2, v in job.env.items()}
    if nodes > 1 and env:
        files["probe/.deepspeed_env"] = deepspeed_env(env).encode()
    record = {"iters": PROBE_ITERS, "script": "probe.sh",
              "candidates": [{"rank": int(p.rank), "log": f"probe/{int(p.rank)}.log",
                              "ds_config": f"probe/ds_config_{int(p.rank)}.json", "megatron_args": list(job.argv),
                              "env": job.env} for p, job in jobs]}
    return files, record


def render_files(result, launcher: str = "deepspeed", probe: int = 0) -> dict[str, bytes]:
    """Every output file of a plan, name -> bytes (deterministic)."""
    from ..output import plan_to_dict
    from ..report import render_report, render_figures

    files: dict[str, bytes] = {}
    data = plan_to_dict(result)
    mds = result.profile.name == "megatron-deepspeed"
    if mds:
        scripts, job = render_scripts(result, launcher)
        cfg = json.dumps(job.ds_config, indent=2, sort_keys=True) + "\n"
        files["ds_config.json"] = cfg.encode()
        files.update(scripts)
        data["megatron_args"] = list(job.argv)
        data["ds_config"] = job.ds_config
        data["env"] = job.env
        data["launcher"] = launcher
        data["schedule"] = {"train_iters": job.train_iters, "from_tokens": bool(result.request.total_tokens),
                            "tokens_per_step": result.best.layout.gbs * result.best.layout.seq_len,
                            **lr_schedule(job.train_iters)}
        data["requires"] = {"megatron_deepspeed_commit": MEGATRON_DEEPSPEED_COMMIT,
                            "deepspeed": DEEPSPEED_REQUIREMENT, "deepspeed_tested": DEEPSPEED_TESTED}
        if probe:
            probe_files, data["probe"] = render_probe(result, probe, launcher)
            files.update(probe_files)
    elif probe:
        raise SpecError("--probe writes a Megatron-DeepSpeed job: it needs --framework megatron-deepspeed")
    data["version"] = 1
    figures = render_figures(data, result)
    files.update(figures)
    files["plan.json"] = (json.dumps(data, indent=2, sort_keys=True, default=_default) + "\n").encode()
    files["report.md"] = render_report(data, figures=figures).encode()
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


def _clean_stale(parent: Path, target: Path) -> None:
    """Remove temporary folders left by runs that were killed (kill -9) while writing `target`: the
    pid in their name belongs to no living process."""
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
        if pid == os.getpid() or _alive(pid):
            continue
        shutil.rmtree(entry.path, ignore_errors=True)


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
    from ..output import check_out_dir

    check_out_dir(out, force, inputs)
    target = Path(out)
    parent = target.resolve().parent
    with _terminate_cleanly():
        tmp = None
        try:
            _clean_stale(parent, target)
            tmp = Path(tempfile.mkdtemp(prefix=_tmp_prefix(target), suffix=".tmp", dir=parent))
            for name, content in sorted(files.items()):
                _write_file(tmp / name, content, (modes or {}).get(name, 0o644))
            os.chmod(tmp, 0o755)
            if force and target.exists():
                if not _exchange(tmp, target.resolve()):
                    old = Path(tempfile.mkdtemp(prefix=_tmp_prefix(target), suffix=".old", dir=parent))
                    os.rmdir(old)
                    os.replace(target, old)
                    os.replace(tmp, target)
                    tmp = old
            else:
                _publish_new(tmp, target, out)
                tmp = None
        except OSError as exc:
            raise SpecError(f"cannot write --out {out}: {exc.strerror or exc}") from None
        finally:
            if tmp is not None and tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
    return target


def write_plan(result, out, force: bool = False, launcher: str = "deepspeed", inputs=(), probe: int = 0) -> Path:
    files = render_files(result, launcher, probe=probe)
    return write_files(files, out, force=force, modes={"launch.sh": 0o755, "probe.sh": 0o755}, inputs=inputs)


def write_report_dir(data: dict, out, force: bool = False, inputs=()) -> Path:
    from ..report import render_figures, render_report

    figures = render_figures(data, None)
    files = dict(figures)
    files["report.md"] = render_report(data, figures=figures).encode()
    return write_files(files, out, force=force, inputs=inputs)

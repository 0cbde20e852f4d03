"""Calibration (issue 9 part 4): refit a small, named set of cost-model constants to runs measured on
the user's own cluster, and apply them to later estimates and plans.

Inputs: Megatron-DeepSpeed logs (the lines `megatron/training.py` training_log and `megatron/utils.py`
report_memory print at the pinned commit), each with the plan.json whose candidate it ran, or measured
runs as YAML in the schema of ../shared/validation/README.md.

Constants (CONSTANTS): a scale on the GPU's GEMM and attention efficiencies, the network efficiency,
the per-step overhead and the host's time to issue one kernel (CPU speed; small layouts are host-bound). The fit is the posterior mode: least squares on log step time, each run's error
measured against RUN_SIGMA (the model's own scatter within a source), plus a log-normal prior on each
constant, inside hard bounds (a projected Levenberg-Marquardt in numpy, so the planner needs no scipy).
A constant no run's step time responds to keeps its catalog value.
"""
from __future__ import annotations

import math
import re
import statistics
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import yaml

from costmodels import catalog
from costmodels.errors import SpecError
from costmodels.units import parse_number

from .measured import MAX_STEP_S, MIN_STEP_S, run_entry


@dataclass(frozen=True)
class Constant:
    name: str
    low: float
    high: float
    sigma: float          # spread of the prior around the catalog value, in log space
    what: str


CONSTANTS = (
    Constant("compute_scale", 0.5, 1.5, 0.15,
             "multiplies the GPU's gemm_efficiency and attention_efficiency (each capped at 0.99)"),
    Constant("network_efficiency", 0.2, 0.98, 0.5, "achieved bus bandwidth / NIC line rate (cluster)"),
    Constant("iteration_overhead_s", 1e-4, 2.0, 1.0, "per-step overhead of the framework, seconds"),
    Constant("host_overhead_s", 5e-6, 2e-4, 0.5, "CPU time to issue one GPU kernel (the host's speed), seconds"),
)
NAMES = tuple(c.name for c in CONSTANTS)
FRAMEWORK_CONSTANTS = ("iteration_overhead_s", "host_overhead_s")     # the rest live on the cluster


# ---- applying a calibration ---------------------------------------------------------------------

CALIB_KEYS = {"version", "made_on", "constants", "provenance", "runs", "mape_before", "mape_after"}


def _written_by_calibrate(path) -> bool:
    """Whether `path` holds a calib.yaml as `planner calibrate` writes it (constants, provenance, runs)."""
    try:
        data = catalog.read_yaml_file(path, "calibration")
    except SpecError:
        return False
    return all(isinstance(data.get(k), t) for k, t in (("constants", dict), ("provenance", dict), ("runs", list)))


def load_calibration(path) -> dict:
    """calib.yaml -> {constant: value}; unknown or out-of-bounds constants are refused."""
    data = catalog.read_yaml_file(path, "calibration")
    catalog.check_known_keys(data, CALIB_KEYS, f"calibration file '{path}'")
    if not isinstance(data.get("constants"), dict):
        raise SpecError(f"calibration file '{path}' has no 'constants' mapping (write it with `planner calibrate`)")
    if data.get("version", 1) != 1 or isinstance(data.get("version"), bool):
        raise SpecError(f"calibration file '{path}': version {str(data.get('version'))[:20]!r} is not one this "
                        "planner reads (1); write it again with `planner calibrate`")
    scope_of_file(data, path)
    return checked_constants(data["constants"], f"calibration file '{path}'")


def checked_constants(constants: dict, where: str) -> dict:
    """{constant: value} with every name known and every value a number inside its bounds (CONSTANTS),
    as calib.yaml is read; the same check for a mapping passed to the Python API."""
    out = {}
    for k, v in constants.items():
        spec = next((c for c in CONSTANTS if c.name == k), None)
        if spec is None:
            raise SpecError(f"{where}: unknown constant {str(k)[:40]!r} (known: {', '.join(NAMES)})")
        out[k] = parse_number(v, what=f"{where}: {k}", low=spec.low, high=spec.high)
    return out


def scope_of_file(data: dict, path) -> dict:
    """A calib.yaml's `made_on` (the GPU and framework of the runs it was fitted to); {} for files
    written before it was recorded."""
    made = data.get("made_on", {})
    if not isinstance(made, dict) or set(made) - {"gpu", "framework"} or \
            not all(isinstance(v, str) and v and len(v) <= 200 and v == v.strip() and v.isprintable()
                    for v in made.values()):
        raise SpecError(f"calibration file '{path}': 'made_on' must map gpu and framework to names "
                        "(write it again with `planner calibrate`)")
    return made


def scope(calibration) -> dict:
    """The GPU and framework a calibration was made on ({} where not recorded, as for a mapping)."""
    if isinstance(calibration, (str, Path)):
        return scope_of_file(catalog.read_yaml_file(calibration, "calibration"), calibration)
    if isinstance(calibration, Calibration):
        return dict(calibration.made_on)
    return {}


def check_scope(calibration, gpu: str, framework: str, asked: str | None = None) -> None:
    """A calibration describes one cluster (its GPU's efficiencies, its host's speed) and one framework
    cost profile (its per-step overhead): applying it to another is refused with one line. Names
    compare as the catalog resolves them (aliases, any case); `asked`: the framework the user named,
    where its cost profile has another name (plan --framework megatron-lm scores with megatron-core)."""
    made = scope(calibration)
    theirs = {"gpu": gpu, "framework": framework}
    wrong = [k for k in ("gpu", "framework") if made.get(k)
             and (catalog.canonical_name(k, made[k]) or made[k]) != (catalog.canonical_name(k, theirs[k]) or theirs[k])]
    if wrong:
        where = f"'{shown_path(str(calibration))}'" if isinstance(calibration, (str, Path)) else "the calibration"
        scored = framework if not asked or asked == framework else f"{framework} (the cost profile of {asked})"
        made_text = " with ".join(made[k] for k in ("gpu", "framework") if made.get(k))
        raise SpecError(f"{where} was made on runs of {made_text}; "
                        f"this is {gpu} with {scored}: calibrate on runs of this GPU and framework (a runs "
                        "file's records take `framework:`), or leave out --calibration")


def made_on(runs) -> dict:
    """The one GPU and framework of the runs; runs of several are refused (one calibration, one cluster)."""
    for what, names in (("GPU", sorted({r.case.cluster.gpu.name for r in runs})),
                        ("framework", sorted({r.case.framework.name for r in runs}))):
        if len(names) > 1:
            raise SpecError(f"the runs are on {len(names)} {what}s ({', '.join(names)}): a calibration "
                            f"describes one cluster and framework; calibrate each {what} on its own runs")
    return {"gpu": runs[0].case.cluster.gpu.name, "framework": runs[0].case.framework.name}


def calibration_runs(calibration) -> list | None:
    """The runs a calibration was made on, as calib.yaml lists them (planner.measured reads their layouts);
    None for a mapping of constants, which names no runs."""
    if isinstance(calibration, (str, Path)):
        return catalog.read_yaml_file(calibration, "calibration").get("runs")
    if isinstance(calibration, Calibration):
        return calibration.to_dict()["runs"]
    return None


def as_constants(calibration) -> dict:
    if calibration is None:
        return {}
    if isinstance(calibration, (str, Path)):
        return load_calibration(calibration)
    if isinstance(calibration, Calibration):
        return dict(calibration.constants)
    if not isinstance(calibration, Mapping):
        raise SpecError(f"calibration must be a calib.yaml path, a Calibration or a mapping of constants, "
                        f"got {type(calibration).__name__}")
    return checked_constants(calibration, "calibration")


def apply_cluster(cluster, constants: dict):
    """The cluster with the calibrated GPU efficiencies and network efficiency (dataclasses.replace)."""
    s = constants.get("compute_scale")
    if s is not None:
        g = cluster.gpu
        cluster = replace(cluster, gpu=replace(g, gemm_efficiency=min(0.99, g.gemm_efficiency * s),
                                               attention_efficiency=min(0.99, g.attention_efficiency * s)))
    if "network_efficiency" in constants:
        cluster = replace(cluster, network_efficiency=constants["network_efficiency"])
    return cluster


def framework_overrides(constants: dict) -> dict:
    """The calibrated constants that replace fields of the framework's cost profile."""
    return {k: constants[k] for k in FRAMEWORK_CONSTANTS if k in constants}


def apply_framework(framework, constants: dict):
    overrides = framework_overrides(constants)
    return replace(framework, **overrides) if overrides else framework


def apply_case(case, constants: dict):
    if not constants:
        return case
    return replace(case, cluster=apply_cluster(case.cluster, constants),
                   framework=apply_framework(case.framework, constants))


def current_constants(case) -> dict:
    return {"compute_scale": 1.0, "network_efficiency": float(case.cluster.network_efficiency),
            "iteration_overhead_s": float(case.framework.iteration_overhead_s),
            "host_overhead_s": float(case.framework.host_overhead_s)}


# ---- Megatron-DeepSpeed logs --------------------------------------------------------------------

# megatron/training.py training_log (6acc370a, lines 1146-1184)
# a number as training_log ('%.1f', '%.3f') and report_memory (str(float)) print it: bounded, so finite
# ASCII digits only ([0-9]: Python's \d also takes other scripts' digits, '２５０.0' read as 250)
_NUM = r"([0-9]{1,15}(?:\.[0-9]{1,20})?(?:[eE][+-]?[0-9]{1,2})?)"
# An iteration line is read in two linear searches (its head, then the elapsed time after it): one
# pattern spanning both ('iteration N/M |.*?elapsed ...') rescans the line from every 'iteration' in it.
_ITER = re.compile(r"iteration\s+([0-9]{1,15})/\s*([0-9]{1,15}) \|")
_ELAPSED = re.compile(r"elapsed time per iteration \(ms\): (\S{1,40}) \|")
_NUM_ONLY = re.compile(_NUM)
MAX_LINE_CHARS = 1 << 16       # Megatron's lines are a few hundred characters; a longer one is not its
# (label as printed, its value's pattern)
_FIELDS = {"global_batch": ("global batch size", r"\s+([0-9]{1,15})"), "seq_len": ("actual seqlen", r"\s+([0-9]{1,15})"),
           "samples_per_s": ("samples per second", " " + _NUM), "tflops": ("TFLOPs", " " + _NUM)}
_FIELD = {k: re.compile(label + ":" + value + r" \|") for k, (label, value) in _FIELDS.items()}
# the same fields, whatever their value: a field that is printed but does not read as a number is damage,
# not absence ('global batch size:  4096x |' was skipped, and the log fitted as if it had none)
_FIELD_ANY = {k: re.compile(label + r":([^|]{0,64})(?:\||$)") for k, (label, _) in _FIELDS.items()}
# megatron/utils.py report_memory (lines 108-122)
_MEM = re.compile(r"memory \(MB\) \| allocated: " + _NUM + r" \| max allocated: " + _NUM + r" \| "
                  r"reserved: " + _NUM + r" \| max reserved: " + _NUM)
# megatron/arguments.py _print_args: '  name ..... value'
# (a launcher may prefix every line: pdsh 'worker-0: ', torchrun --tee '[default0]:')
# What PyTorch prints when the caching allocator cannot serve an allocation (torch.OutOfMemoryError since
# 2.1, before it a RuntimeError): "CUDA out of memory. Tried to allocate ..."
_OOM_BYTES = re.compile(rb"CUDA out of memory|OutOfMemoryError")
_PRINTED_NUMBER = re.compile(r"[0-9]+(?:\.[0-9]+)?")    # how Python prints an int or a float
_ARG = re.compile(r"^(?:\S{1,64}:)?\s+([a-z_0-9]+) \.+ (.*)$")
CHECKED_ARGS = {"num_layers": "num_layers", "hidden_size": "hidden", "num_attention_heads": "num_heads",
                "num_key_value_heads": "num_kv_heads", "ffn_hidden_size": "ffn_hidden",
                "seq_length": "seq_len", "tensor_model_parallel_size": "tp",
                "pipeline_model_parallel_size": "pp", "ds_sequence_parallel_size": "cp",
                "micro_batch_size": "mbs", "global_batch_size": "gbs", "zero_stage": "zero",
                "world_size": "gpus", "data_parallel_size": "dp"}
# Arguments that say how the run trained (precision, recomputation): 'True' / 'False' or a name
# (megatron/arguments.py prints every argument; --checkpoint-activations and --recompute-granularity
# are what launch.sh passes for recomputation, planner/emit/megatron_ds.py).
CHECKED_FLAGS = ("fp16", "bf16", "checkpoint_activations", "recompute_granularity")
WARMUP_ITERS = 3        # the first iterations include compilation, allocator growth and NCCL setup


@dataclass(frozen=True)
class LogRun:
    path: str
    iterations: tuple          # (iteration, ms)
    train_iters: int
    step_s: float              # median after the warm-up
    global_batch: int | None
    seq_len: int | None
    tflops: float | None
    samples_per_s: float | None
    memory_mb: dict | None     # allocated, max_allocated, reserved, max_reserved
    args: dict


MAX_LOG_BYTES = 1 << 30        # a training log of a few million iteration lines


# Every line the parser reads holds one of these: an iteration line, the memory report or an argument
# line ('  name ..... value'); the others are skipped without being split out of the text.
_KEYWORDS = re.compile(r"iteration|memory \(MB\)| \.\.")
_KEYWORDS_BYTES = re.compile(_KEYWORDS.pattern.encode())


_BREAK = re.compile(rb"[\r\n]")


def _lines_to_read(raw: bytes):
    """(line number, line) of each line holding a keyword, in order, in time and memory linear in the
    log's bytes: a log of millions of other lines (or of newlines only) is never split into a list of
    them, and only the lines read are decoded (UTF-8, undecodable bytes replaced: a whole log decoded
    took up to 4 bytes per character, 5 GB for a 1 GB log with one emoji in it). A line ends at '\n'
    or '\r' (progress bars rewrite a line with '\r'), which no UTF-8 character holds as a byte; lines
    are numbered by '\n'. Lines longer than MAX_LINE_CHARS bytes are skipped (no Megatron line is)."""
    after, number, counted_to = 0, 1, 0        # raw[:after] is read; its last byte is a break
    for m in _KEYWORDS_BYTES.finditer(raw):
        pos = m.start()
        if pos < after:
            continue                                    # a second keyword on a line already read
        start = max(raw.rfind(b"\n", after, pos), raw.rfind(b"\r", after, pos), after - 1) + 1
        brk = _BREAK.search(raw, pos)
        end = brk.start() if brk else len(raw)
        number += raw.count(b"\n", counted_to, start)
        counted_to, after = start, end + 1
        if end - start <= MAX_LINE_CHARS:
            for line in raw[start:end].decode("utf-8", "replace").splitlines():   # the other breaks it knows
                if _KEYWORDS.search(line):
                    yield number, line


def _looks_utf16(raw: bytes) -> bool:
    """A UTF-16 file read as UTF-8: a byte-order mark (two replacement characters) or a NUL beside
    every other ASCII letter."""
    head = raw[:16384].decode("utf-8", "replace")[:4096]
    if head.startswith("\ufffd\ufffd"):
        return True
    for nuls, letters in ((head[1::2], head[0::2]), (head[0::2], head[1::2])):   # little / big endian
        if len(head) >= 16 and nuls.count("\0") >= 0.9 * len(nuls) and \
                sum(ch.isprintable() or ch in "\r\n\t" for ch in letters if ch != "\0") >= 0.9 * len(letters):
            return True
    return False


def parse_log(path) -> LogRun:
    raw = catalog.read_text_file(path, "log", limit=MAX_LOG_BYTES, decode=False)
    iters, fields, memory, args = [], {}, None, {}
    for number, line in _lines_to_read(raw):
        m = _ITER.search(line)
        e = _ELAPSED.search(line, m.end()) if m else None
        if e:
            if not _NUM_ONLY.fullmatch(e.group(1)):
                raise SpecError(f"log '{path}', line {number}: elapsed time per iteration is {e.group(1)!r}, not "
                                "a time in milliseconds; the log is damaged")
            it = int(m.group(1))
            if iters and it <= iters[-1][0]:
                raise SpecError(f"log '{path}', line {number}: iteration {it} follows iteration {iters[-1][0]}; "
                                "the iteration numbers must rise (two runs mixed in one file, or a restart): "
                                "give each run's log on its own")
            iters.append((it, int(m.group(2)), float(e.group(1))))
            for k, rx in _FIELD.items():
                f = rx.search(line)
                if f:
                    fields.setdefault(k, []).append(float(f.group(1)))
                elif (raw := _FIELD_ANY[k].search(line)) is not None:
                    value = raw.group(1).strip()[:40]
                    raise SpecError(f"log '{path}', line {number}: {_FIELDS[k][0]} is {value!r}, not a "
                                    f"{'whole number' if k in ('global_batch', 'seq_len') else 'number'}; "
                                    "the log is damaged")
            continue
        m = _MEM.search(line)
        if m and memory is None:
            memory = dict(zip(("allocated", "max_allocated", "reserved", "max_reserved"),
                              (float(x) for x in m.groups())))
            continue
        m = _ARG.match(line)
        if m and (m.group(1) in CHECKED_ARGS or m.group(1) in CHECKED_FLAGS):
            name, value = m.group(1), m.group(2).strip()
            if args.get(name, value) != value:
                raise SpecError(f"log '{path}' holds more than one run: its arguments give {name} "
                                f"{args[name]} and later {value} (line {number}); give each "
                                "run's log on its own")
            args[name] = value
    if not iters and _looks_utf16(raw):
        raise SpecError(f"log '{path}' is not UTF-8 text; it looks like UTF-16 (as Windows PowerShell's '>' "
                        "writes): save it as UTF-8")
    if not iters and _OOM_BYTES.search(raw):
        raise SpecError(f"log '{path}' has no iteration lines: the run ran out of GPU memory ('out of memory' "
                        "in the log) before its first logged iteration; leave this log out (probe.sh prints "
                        "the command with the logs of the candidates that ran)")
    if not iters:
        raise SpecError(f"log '{path}' has no iteration lines (Megatron-DeepSpeed's 'iteration N/M | ... "
                        "elapsed time per iteration (ms): X |'); is it a training log, with --log-interval set?")
    last, total = iters[-1][0], iters[-1][1]
    # Megatron logs every log_interval-th iteration (training.py: iteration % log_interval == 0): a run that
    # finished logs its last multiple of the interval, which may be below the total. The interval is read
    # off the last two iteration lines, not the argument dump, which a damaged log could make say anything.
    log_interval = max(1, last - iters[-2][0]) if len(iters) > 1 else 1
    if last + log_interval <= total:
        raise SpecError(f"log '{path}' is truncated: its last iteration line is {last} of {total} "
                        "(the run stopped early or the log was cut)")
    steady = [ms for it, _, ms in iters if it > WARMUP_ITERS]
    if not steady:
        raise SpecError(f"log '{path}' holds only warm-up iterations ({iters[-1][0]} of them; the first "
                        f"{WARMUP_ITERS} include compilation, allocator growth and NCCL setup): run more "
                        "iterations (probe.sh runs 20)")
    step = statistics.median(steady) / 1e3
    if not MIN_STEP_S <= step <= MAX_STEP_S:
        raise SpecError(f"log '{path}': its elapsed time per iteration is {step * 1e3:.4g} ms, outside any "
                        f"training step ({MIN_STEP_S * 1e3:g} ms to {MAX_STEP_S:g} s), so the log is damaged")
    last_of = lambda k: fields[k][-1] if fields.get(k) else None
    gb, sl = last_of("global_batch"), last_of("seq_len")
    return LogRun(str(path), tuple((it, ms) for it, _, ms in iters), total, statistics.median(steady) / 1e3,
                  int(gb) if gb is not None else None, int(sl) if sl is not None else None, last_of("tflops"),
                  last_of("samples_per_s"),
                  memory, args)


def _plan_for(log: Path, plan) -> Path:
    if plan is not None:
        return Path(plan)
    for cand in (log.parent / "plan.json", log.parent.parent / "plan.json"):
        if cand.exists():
            return cand
    raise SpecError(f"log '{log}': no plan.json next to it or one folder up; give the plan with --plan plan.json")


def _rank_of(log: Path, data: dict, path) -> int:
    m = re.fullmatch(r"([0-9]{1,6})", log.stem)    # ASCII digits: a full-width 3 is no rank
    if m:
        return int(m.group(1))
    if len(data.get("runner_ups") or []) == 0:
        return 1
    raise SpecError(f"log '{log}': cannot tell which candidate of '{path}' it ran; name it <rank>.log "
                    "as probe.sh does")


def case_for_log(log: Path, plan_path: Path):
    """(case, plan layout) of the candidate that `log` ran."""
    from .emit.plan_file import _case, _describe, check_plan, load_plan_json
    from .specs import case_from_dict

    data = load_plan_json(plan_path)
    check_plan(data, plan_path)        # as explain and estimate check it: a tampered layout is refused
    try:
        rank = _rank_of(log, data, plan_path)
        case = _case(data)
        if rank != 1:
            entry = next((r for r in data.get("runner_ups") or [] if r.get("rank") == rank), None)
            if entry is None:
                raise SpecError(f"log '{log}': plan '{plan_path}' has no candidate of rank {rank}")
            case["parallel"] = {k: v for k, v in entry["layout"].items() if k != "density"}
    except (KeyError, TypeError, AttributeError, ValueError) as exc:
        raise SpecError(f"plan file '{plan_path}' is damaged: {_describe(exc)}") from None
    return case_from_dict(case)


def check_log_matches(run: LogRun, case, path) -> None:
    """A log from another model or layout than its plan's candidate is refused, naming the field."""
    l, m = case.layout, case.model
    want = {"num_layers": m.num_layers, "hidden": m.hidden, "num_heads": m.num_heads,
            "num_kv_heads": m.num_kv_heads, "ffn_hidden": m.ffn_hidden, "seq_len": l.seq_len,
            "tp": l.tp, "pp": l.pp, "cp": l.cp, "mbs": l.mbs, "gbs": l.gbs, "zero": int(l.zero),
            "gpus": case.cluster.num_gpus, "dp": l.dp}
    for arg, key in CHECKED_ARGS.items():
        if arg in run.args:
            text = run.args[arg]
            if text == "None":
                continue                          # not set
            try:
                # Megatron-DeepSpeed prints --zero-stage's default as 1.0; Python prints plain ASCII digits
                # (float() would read a full-width '３２' as 32, and '8_0' as 80)
                value = float(text) if _PRINTED_NUMBER.fullmatch(text) else math.nan
            except ValueError:
                value = math.nan
            if not math.isfinite(value) or not value.is_integer():
                raise SpecError(f"log '{path}': its argument {arg} is {text[:40]!r}, not a whole number; "
                                "the log is damaged")
            got = int(value)
            if got != want[key]:
                raise SpecError(f"log '{path}' is from another model or layout: {arg} {got} in the log, "
                                f"{want[key]} in the plan")
    _check_log_flags(run, case, path)
    if run.global_batch is not None and run.global_batch != l.gbs:
        raise SpecError(f"log '{path}' is from another model or layout: global batch size {run.global_batch} "
                        f"in the log, {l.gbs} in the plan")
    if run.seq_len is not None and run.seq_len != l.seq_len:
        raise SpecError(f"log '{path}' is from another model or layout: actual seqlen {run.seq_len} in the "
                        f"log, {l.seq_len} in the plan")


def _log_flag(run: LogRun, name: str, path):
    """An argument line's True / False (None where the log does not print it)."""
    text = run.args.get(name)
    if text is None:
        return None
    if text not in ("True", "False"):
        raise SpecError(f"log '{path}': its argument {name} is {text[:40]!r}, not True or False; the log is damaged")
    return text == "True"


def _check_log_flags(run: LogRun, case, path) -> None:
    """Precision and recomputation as the log's arguments print them, against the plan's candidate
    (launch.sh passes --bf16 for bf16 and fp8, --fp16 for fp16; --checkpoint-activations, or
    --recompute-granularity full / selective, for recomputation)."""
    from costmodels.types import Precision

    l = case.layout
    want = {"bf16": l.precision in (Precision.BF16, Precision.FP8), "fp16": l.precision is Precision.FP16}
    got = {name: _log_flag(run, name, path) for name in want}
    if any(got[n] is not None and got[n] != want[n] for n in want):
        trained = "bf16" if got["bf16"] else "fp16" if got["fp16"] else \
            "fp32" if got["bf16"] is False and got["fp16"] is False else "another precision"
        shown = ", ".join(f"{n} {got[n]}" for n in want if got[n] is not None)
        raise SpecError(f"log '{path}' is from another layout: it trained in {trained} ({shown} in its "
                        f"arguments), the plan's candidate in {l.precision.value}")
    ckpt = _log_flag(run, "checkpoint_activations", path)
    gran = run.args.get("recompute_granularity")
    if ckpt is None and gran is None:
        return
    if gran not in (None, "None", "full", "selective"):
        raise SpecError(f"log '{path}': its argument recompute_granularity is {gran[:40]!r}, not full, "
                        "selective or None; the log is damaged")
    got = "full" if ckpt or gran == "full" else "selective" if gran == "selective" else "none"
    if got != l.recompute.value:
        raise SpecError(f"log '{path}' is from another layout: it trained with recompute {got}, the plan's "
                        f"candidate with recompute {l.recompute.value}")


# ---- runs ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Run:
    id: str
    source: str
    case: object
    measured_step_s: float
    memory_mb: dict | None = None
    # parts of the model's step the measurement does not contain (planner.validation.Record.step_excludes;
    # benchmarks only: vTrain's assembled single-node times hold no per-step overhead)
    step_excludes: tuple = ()


def load_runs(inputs, plan=None) -> list[Run]:
    runs, seen, stems = [], {}, set()
    for item in inputs:
        if not str(item).strip():
            raise SpecError("an input path is empty; give Megatron-DeepSpeed logs or a runs YAML file")
        p = Path(item)
        if not p.exists():
            raise SpecError(f"input '{item}' does not exist")
        try:
            key = p.resolve()
        except (OSError, RuntimeError):
            key = p
        if key in seen:         # the same file twice would count its runs twice in the fit and the error
            raise SpecError(f"input '{item}' is the same file as '{seen[key]}'; give each log or runs file once")
        seen[key] = item
        if p.suffix.lower() in (".yaml", ".yml"):
            runs += _yaml_runs(p, stems)
            stems.add(p.stem)
            continue
        run = parse_log(p)
        plan_path = _plan_for(p, plan)
        case = case_for_log(p, plan_path)
        check_log_matches(run, case, p)
        runs.append(Run(str(p), f"log:{plan_path}", case, run.step_s, run.memory_mb))
    if not runs:
        raise SpecError("no runs to calibrate on")
    seen_ids: set[str] = set()
    for r in runs:
        if r.id in seen_ids:
            raise SpecError(f"two runs have the id '{r.id}'; give each run its own `id:`, so that none is "
                            "counted twice")
        seen_ids.add(r.id)
    return runs


# Defaults for a measured run that is not one of the published sources: what launch.sh writes
# (Megatron-DeepSpeed, bf16, FlashAttention-2, no recomputation, ZeRO-1), unless the record says otherwise.
USER_RULES = dict(framework="megatron-deepspeed", precision="bf16", flash=True, dropout=0.0, recompute="none",
                  vpp=1, zero=1, mbs=1)
# The keys a runs-file record may hold: the schema of ../shared/validation/README.md (with
# deepspeed_runs.yaml's offload / zeropp), the layout knobs planner/validation.py reads beyond it, and
# the two link rates of a user's own cluster. Anything else is refused (a misspelt key would be
# ignored, and the run predicted as another layout).
RUN_KEYS = {
    None: {"id", "source", "notes", "framework", "model", "cluster", "parallel", "measured"},
    "model": {"name", "num_layers", "hidden_size", "ffn_hidden_size", "num_attention_heads", "num_kv_heads",
              "vocab_size", "seq_length", "activation", "moe"},
    "cluster": {"gpu", "num_gpus", "gpus_per_node", "intra_node", "inter_node", "network_bandwidth",
                "nvlink_bandwidth"},
    "parallel": {"tp", "pp", "dp", "cp", "vpp", "micro_batch", "global_batch", "zero_stage", "recompute",
                 "sequence_parallel", "precision", "flash_attention", "first_stage_layers", "last_stage_layers",
                 "cpu_offload_layers", "recompute_layers", "offload_optimizer", "offload_params",
                 "offload_activations", "tp_comm_overlap", "offload", "zeropp"},
}   # `measured` may hold any figures a source gives (samples_per_s, flop_formula, ...): only step_time_s
    # (required, checked) and peak_memory_gib are read


def _check_run_keys(rec: dict, where: str) -> None:
    for section, known in RUN_KEYS.items():
        catalog.check_known_keys(rec if section is None else rec[section], known,
                                 where if section is None else f"{where}, {section}")


MAX_MEMORY_GIB = 4096          # far above any GPU's memory: a larger reading is a damaged file


def _yaml_runs(p: Path, stems_seen=frozenset()) -> list[Run]:
    from search_spaces.frameworks import structural_errors

    from .specs import case_from_dict
    from .validation import record_from_published

    data = catalog.read_yaml_data(p, "runs")
    if not isinstance(data, list):
        raise SpecError(f"runs file '{p}' must be a list of records with model, cluster, parallel, measured")
    out = []
    for i, rec in enumerate(data):
        where = f"runs file '{p}', record {i + 1}"
        if not isinstance(rec, dict) or any(not isinstance(rec.get(k), dict)
                                            for k in ("model", "cluster", "parallel", "measured")):
            raise SpecError(f"{where}: needs model, cluster, parallel and measured, each a mapping "
                            "(../shared/validation/README.md)")
        step = rec["measured"].get("step_time_s")
        if isinstance(step, bool) or not isinstance(step, (int, float)) or not MIN_STEP_S <= step <= MAX_STEP_S:
            raise SpecError(f"{where}: measured.step_time_s must be a number of seconds from {MIN_STEP_S:g} to "
                            f"{MAX_STEP_S:g}, got {str(step)[:40]!r}")
        for key in ("tp", "pp", "dp", "cp", "vpp", "micro_batch", "global_batch", "zero_stage",
                    "first_stage_layers", "last_stage_layers", "cpu_offload_layers", "recompute_layers"):
            value = rec["parallel"].get(key)
            low = 1 if key in ("tp", "pp", "dp", "cp", "vpp", "micro_batch", "global_batch") else 0
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or not low <= value <= 10**7):
                raise SpecError(f"{where}: parallel.{key} must be a whole number from {low} to 10^7, "
                                f"got {str(value)[:40]!r}")
        _check_run_keys(rec, where)
        for key in ("tp", "pp", "dp", "global_batch"):
            if rec["parallel"].get(key) is None:
                raise SpecError(f"{where}: parallel.{key} is missing or null; a measured step time is "
                                "compared with the layout that ran, so give tp, pp, dp and global_batch")
        gpu = rec["cluster"].get("gpu")
        if not isinstance(gpu, str) or not gpu.strip():
            raise SpecError(f"{where}: cluster.gpu must be a GPU name such as 'H100-SXM', got {str(gpu)[:40]!r}")
        memory = rec["measured"].get("peak_memory_gib")
        if memory is not None and (isinstance(memory, bool) or not isinstance(memory, (int, float))
                                   or not 0 < memory <= MAX_MEMORY_GIB):
            raise SpecError(f"{where}: measured.peak_memory_gib must be a number of GiB above 0 and at most "
                            f"{MAX_MEMORY_GIB:,} (or null), got {str(memory)[:40]!r}")
        moe = rec["model"].get("moe")
        if moe not in (None, False, 0, "none", "null"):
            raise SpecError(f"{where}: model.moe is {str(moe)[:40]!r}: a Mixture-of-Experts run; MoE is not "
                            "supported yet, and calibrating on it as a dense model would be wrong")
        if "id" in rec and (not isinstance(rec["id"], str) or not rec["id"].isprintable() or not 0 < len(rec["id"]) <= 200):
            raise SpecError(f"{where}: id must be a string of 1 to 200 printable characters (no newline or "
                            f"escape), got {str(rec['id'])[:40]!r}")
        # a run without an id is named by its file and place; files of one name in two folders keep apart
        rec = {"id": f"{p.stem}-{i + 1}" if p.stem not in stems_seen else f"{p}-{i + 1}", "notes": "", **rec,
               "parallel": _deepspeed_schema_keys(rec["parallel"], where)}
        rules = _rules_of(rec, where)
        try:
            r = record_from_published(rec, rules=rules, source=None if rules is None else str(p))
            if r is None or not r.measured_step_s:
                raise SpecError("no measured step time (measured.step_time_s) or a GPU the catalog does not know")
            case = case_from_dict(r.case)
            structural_errors(case)
            _check_framework_rules(case)
        except SpecError as exc:
            raise SpecError(f"{where}: {exc}") from None
        except KeyError as exc:
            raise SpecError(f"{where}: missing field {exc} (../shared/validation/README.md)") from None
        except (TypeError, ValueError, AttributeError, ArithmeticError) as exc:
            raise SpecError(f"{where}: {exc.__class__.__name__}: {str(exc)[:200]}") from None
        # a record's id is text, not a file: its local paths are cut as a model's source: text is
        out.append(Run(catalog.without_local_paths(r.id), r.source, case, float(r.measured_step_s)))
    return out


# The framework rules a run cannot break and still train (search_spaces/frameworks.py): DeepSpeed or
# Megatron asserts, or the flag does not exist. The others are the planner's preferences (selective
# recompute that does nothing with FlashAttention, --sequence-parallel whose replicas drift, partial
# recompute under the pipeline, ZeRO++ on bf16, NVMe optimizer offload below ZeRO-3): those runs train,
# so their step times are measurements like any other.
IMPOSSIBLE_RULES = frozenset({
    "mds-zero-needs-no-pipeline", "mds-no-interleaving", "mds-no-tp-comm-overlap", "mds-fp8-transformer-engine",
    "mds-no-1bit", "mds-ulysses", "mds-position-embeddings", "mlm-layers-divide", "mlm-sharding",
    "mlm-no-offload", "mlm-grad-comm"})


def _check_framework_rules(case) -> None:
    """A record whose layout breaks its framework's rules (planner.api.rule_warnings: pp 2 with ZeRO-2
    under Megatron-DeepSpeed, which DeepSpeed refuses) cannot have run there; cost profiles without a
    rule set (torchtitan, ...) have none."""
    from search_spaces.frameworks import case_violations

    profile, broken = case_violations(case)
    for rule, msg, _ in broken:
        if rule.name not in IMPOSSIBLE_RULES:
            continue          # a preference (it trains, to no gain or drifting): its step time is real
        raise SpecError(f"the layout breaks the {profile.name} rule '{rule.name}' ({msg}), so it cannot have "
                        f"run on {profile.name}; give the record's framework (`framework:`) or its real layout")


def _deepspeed_schema_keys(parallel: dict, where: str) -> dict:
    """deepspeed_runs.yaml's two extra layout keys (../shared/validation/README.md section 3) in the
    planner's terms: `offload: cpu` / `nvme` is ZeRO-Offload of the optimizer (offload_optimizer), `none`
    or null nothing; `zeropp` (ZeRO++ / hpZ / MiCS features) is not modelled from a record, so it must be
    absent or null."""
    out = {k: v for k, v in parallel.items() if k not in ("offload", "zeropp")}
    offload = parallel.get("offload")
    if offload not in (None, "none", "cpu", "nvme"):
        raise SpecError(f"{where}: parallel.offload must be none, cpu, nvme or null, got {str(offload)[:40]!r}")
    if offload in ("cpu", "nvme"):
        out.setdefault("offload_optimizer", offload)      # as planner/validation.py reads these records
    if parallel.get("zeropp") not in (None, False, "none"):
        raise SpecError(f"{where}: parallel.zeropp (ZeRO++ / hpZ / MiCS features) is not read from a runs file; "
                        "leave it out or null")
    return out


def _rules_of(rec: dict, where: str):
    """How a runs-file record's unstated knobs are filled: its `framework:` (a cost profile; default
    megatron-deepspeed, what launch.sh runs) with launch.sh's defaults; a record copied from a
    published source (an id of that source and its `source:` citation) by that source's rules (None)."""
    from .validation import SOURCES, source_of

    name = rec.get("framework")
    if name is None:
        if "source" in rec and source_of(str(rec["id"])) in SOURCES:
            return None
        return USER_RULES
    known = catalog.canonical_name("framework", name) if isinstance(name, str) else None
    if known is None:
        raise SpecError(f"{where}: framework {str(name)[:40]!r} is not a known cost profile "
                        f"(one of {', '.join(catalog.names('framework'))})")
    return {**USER_RULES, "framework": known}


# ---- the fit ------------------------------------------------------------------------------------

def _groups(cases) -> dict[tuple, list[int]]:
    """Indices of the cases one estimate_batch call takes together: same model, cluster type and
    framework."""
    groups: dict[tuple, list[int]] = {}
    for i, case in enumerate(cases):
        key = (repr(case.model), repr(replace(case.cluster, num_gpus=case.cluster.gpus_per_node)),
               repr(case.framework))
        groups.setdefault(key, []).append(i)
    return groups


def predict(runs: list[Run], constants: dict) -> np.ndarray:
    """Step time of every run with `constants` applied, vectorised over runs that share model, cluster
    type and framework (as planner.validation.evaluate)."""
    from costmodels.estimate import estimate_batch
    from costmodels.types import LayoutBatch

    prepared = [apply_case(r.case, constants) for r in runs]
    out = np.empty(len(runs))
    for idx in _groups(prepared).values():
        first = prepared[idx[0]]
        batch = estimate_batch(first.model, first.cluster, first.framework,
                               LayoutBatch.from_layouts([prepared[i].layout for i in idx]))
        out[idx] = np.asarray(batch.step_time_s, dtype=float)
    for i, run in enumerate(runs):
        if "iteration_overhead" in run.step_excludes:
            out[i] -= prepared[i].framework.iteration_overhead_s
    return out


# How far the model misses a run even with the right constants: the scatter of runs around their
# source's mean error. Each run's log error is divided by it, each constant's distance from the catalog
# by its prior sigma, so one run moves a constant by sigma^2 / (sigma^2 + RUN_SIGMA^2) of what would
# match it exactly (the posterior mode of a normal prior and a normal error), and many runs by nearly
# all of it. 0.09: the in-sample mean error of the published sources (benchmarks/validate.py: 9.1% when
# it was set, 8.1% since the ZeRO-3 versions were told apart on 2026-11-24), which is what is left of a source once the
# constants fit it.
RUN_SIGMA = 0.09


@dataclass(frozen=True)
class Calibration:
    constants: dict
    prior: dict
    runs: list
    before: list            # relative step-time error per run, before
    after: list
    refitted: tuple = NAMES  # the constants the runs could see (`identifiable`); the rest kept
    run_sigma: float = RUN_SIGMA
    made_on: dict = field(default_factory=dict)   # the runs' GPU and framework (`check_scope`)

    def to_dict(self) -> dict:
        return {
            "version": 1,
            "made_on": dict(self.made_on),
            "constants": {k: float(f"{v:.6g}") for k, v in self.constants.items()},
            "provenance": {
                "method": "posterior mode: least squares on log step time, each run's error over "
                          f"run_sigma {self.run_sigma}, plus a log-normal prior on each constant (planner/calibrate.py)",
                "refitted": list(self.refitted),
                "kept": [n for n in NAMES if n not in self.refitted],
                "prior": {k: float(f"{v:.6g}") for k, v in self.prior.items()},
                "bounds": {c.name: [c.low, c.high] for c in CONSTANTS},
                "meaning": {c.name: c.what for c in CONSTANTS},
            },
            "runs": [{"id": shown_path(r.id), "source": shown_path(r.source), **run_entry(r.case, r.measured_step_s),
                      "error_before": float(f"{b:.4f}"), "error_after": float(f"{a:.4f}")}
                     for r, b, a in zip(self.runs, self.before, self.after)],
            "mape_before": float(f"{_mape(self.before):.4f}"),
            "mape_after": float(f"{_mape(self.after):.4f}"),
        }


def shown_path(text: str) -> str:
    """A run's file as calib.yaml and the output show it: relative to the working directory when it lies
    under it, else its folder and name only (no local absolute path reaches a written file). A 'log:'
    prefix is kept."""
    prefix = "log:" if text.startswith("log:") else ""
    raw = text[len(prefix):]
    if not raw or "/" not in raw and "\\" not in raw:
        return text
    p = Path(raw)
    try:
        cwd = Path.cwd().resolve()
        if cwd == Path(cwd.anchor):
            raise ValueError("run from the filesystem root: a relative path would spell the absolute one")
        return prefix + str(p.resolve().relative_to(cwd))
    except (ValueError, OSError, RuntimeError):
        return prefix + str(Path(p.parent.name) / p.name)


def _mape(errors) -> float:
    return float(np.mean(np.abs(errors))) if len(errors) else 0.0


SENSITIVITY_FLOOR = 0.01  # |d log step time / d log constant| below this on every run: the runs cannot see it


def sensitivities(runs: list[Run], prior: dict, names=NAMES) -> dict:
    """d log(step time) / d log(constant) at the prior, per constant: one array over the runs (central
    differences, 1% steps)."""
    out = {}
    for name in names:
        up = predict(runs, {**prior, name: prior[name] * 1.01})
        down = predict(runs, {**prior, name: prior[name] / 1.01})
        out[name] = np.log(up / down) / (2 * math.log(1.01))
    return out


def identifiable(runs: list[Run], prior: dict, fixed: tuple = ()) -> tuple:
    """The constants a calibration on `runs` may move: those the runs' step times respond to (any
    run's sensitivity at least SENSITIVITY_FLOOR; single-node runs do not see the network). The
    others keep their catalog values, and calib.yaml says which were not seen."""
    names = [n for n in NAMES if n not in fixed]
    sens = sensitivities(runs, prior, names)
    return tuple(n for n in names if float(np.max(np.abs(sens[n]))) >= SENSITIVITY_FLOOR)


def fit(runs: list[Run], fixed: tuple = (), run_sigma: float = RUN_SIGMA) -> Calibration:
    """Refit the identifiable CONSTANTS (`identifiable`; never those named in `fixed`) to the runs'
    measured step times."""
    where = made_on(runs)
    prior = current_constants(runs[0].case)
    free_names = identifiable(runs, prior, fixed)
    free = [c for c in CONSTANTS if c.name in free_names]
    if not free:
        before = list(predict(runs, prior) / np.array([r.measured_step_s for r in runs]) - 1.0)
        return Calibration(dict(prior), prior, list(runs), before, list(before), (), run_sigma, where)
    measured = np.array([r.measured_step_s for r in runs])
    lo = np.log([c.low for c in free])
    hi = np.log([c.high for c in free])
    mu = np.log([np.clip(prior[c.name], c.low, c.high) for c in free])
    sig = np.array([c.sigma for c in free])

    def consts(x):
        return {**prior, **{c.name: float(math.exp(v)) for c, v in zip(free, x)}}

    def residuals(x):
        pred = predict(runs, consts(x))
        return np.concatenate([np.log(pred / measured) / run_sigma, (x - mu) / sig])

    x = mu.copy()
    r = residuals(x)
    lam = 1e-2
    for _ in range(60):
        jac = np.empty((len(r), len(x)))
        for j in range(len(x)):     # central differences, 1% steps (the model's terms are piecewise smooth)
            h = 1e-2
            xp, xm = x.copy(), x.copy()
            xp[j] += h
            xm[j] -= h
            jac[:, j] = (residuals(xp) - residuals(xm)) / (2 * h)
        a = jac.T @ jac
        g = jac.T @ r
        improved = False
        for _ in range(10):
            step = np.linalg.solve(a + lam * np.diag(np.diag(a) + 1e-12), -g)
            xn = np.clip(x + step, lo, hi)
            rn = residuals(xn)
            if rn @ rn < r @ r - 1e-12:
                x, r, lam, improved = xn, rn, max(lam / 3, 1e-7), True
                break
            lam *= 4
        if not improved or np.max(np.abs(step)) < 1e-6:
            break
    final = {k: v for k, v in consts(x).items()}
    before = list(predict(runs, prior) / measured - 1.0)
    after = list(predict(runs, final) / measured - 1.0)
    return Calibration(final, prior, list(runs), before, after, tuple(free_names), run_sigma, where)


MAX_RUNS = 500
MAX_GROUPS = 16   # distinct (model, GPU type, framework) groups: the fit estimates each ~1,000 times
# A calibration that leaves the runs further off than this has not found the cluster's constants: the
# runs are not what the model describes (a log of another job, a record of another layout).
MAX_MAPE_AFTER = 0.25
BOUND_TOLERANCE = 0.02    # a refitted constant this close to a bound (relative) is taken as stopped by it


def check_fit(cal: Calibration) -> None:
    """Refuse a calibration that cannot match its runs: still more than MAX_MAPE_AFTER off after the
    fit, with a constant stopped at its bound or no better than before (one error line, nothing written)."""
    after, before = _mape(cal.after), _mape(cal.before)
    if after <= MAX_MAPE_AFTER:
        return
    at_bound = []
    for c in CONSTANTS:
        value = cal.constants[c.name]
        # within BOUND_TOLERANCE: the prior holds the optimum a little inside a bound it presses on
        # (a review fuzzed compute_scale 1.497 of 1.5 with the runs still 58% off)
        if c.name in cal.refitted and value <= c.low * (1 + BOUND_TOLERANCE):
            at_bound.append(f"{c.name} at its lower bound {c.low:g}")
        elif c.name in cal.refitted and value >= c.high / (1 + BOUND_TOLERANCE):
            at_bound.append(f"{c.name} at its upper bound {c.high:g}")
    if at_bound or after >= before:
        why = ", ".join(at_bound) if at_bound else f"no better than before ({before * 100:.1f}%)"
        raise SpecError(f"the calibration cannot match the runs: after refitting the model is still "
                        f"{after * 100:.1f}% off ({why}); check that each log belongs to its plan's candidate "
                        "and each record's layout is the one that ran")


def calibrate(inputs, plan=None, out=None, fixed: tuple = (), force: bool = False) -> Calibration:
    """Python API: refit the constants to logs (with their plan.json) or measured-run YAML files; with
    `out`, write calib.yaml (atomically; an existing file only with `force`, never one of the inputs).
    Returns the Calibration (.constants, .before, .after, .to_dict())."""
    from .outdir import write_out_file

    if isinstance(inputs, (str, Path)):
        inputs = [inputs]
    runs = load_runs(inputs, plan)
    read = list(inputs) + [r.source[len("log:"):] for r in runs if r.source.startswith("log:")]
    if len(runs) > MAX_RUNS:
        raise SpecError(f"{len(runs):,} runs to calibrate on; at most {MAX_RUNS:,} are taken (each model "
                        "costs a second or more of fitting): calibrate on the runs of the cluster you plan for")
    groups = len(_groups([r.case for r in runs]))
    if groups > MAX_GROUPS:
        raise SpecError(f"the runs are of {groups} different models (or GPU types or frameworks); at most "
                        f"{MAX_GROUPS} are taken, each costs about a second of fitting: calibrate on the runs of "
                        "the cluster and the models you plan for")
    cal = fit(runs, fixed=fixed)
    check_fit(cal)
    if out is not None:
        write_out_file(out, yaml.safe_dump(cal.to_dict(), sort_keys=False), force, inputs=read,
                       ours=_written_by_calibrate, kind="calib.yaml")
    return cal


def calibration_text(cal: Calibration) -> str:
    """What `planner calibrate` prints: one line per constant and per run (a file name's control
    characters shown as '?', as names are elsewhere)."""
    from .emit.shell import printable
    lines = ["constants (catalog -> calibrated):"]
    for c in CONSTANTS:
        lines.append(f"  {c.name:22s} {cal.prior[c.name]:.4g} -> {cal.constants[c.name]:.4g}")
    kept = [n for n in NAMES if n not in cal.refitted]
    if kept:
        lines.append(f"  kept at the catalog value (no run's step time responds to it): {', '.join(kept)}")
    lines.append("step-time error per run (predicted / measured - 1; before: with the catalog's constants, "
                 "not those of a calibration the plan was made with):")
    for r, b, a in zip(cal.runs, cal.before, cal.after):
        lines.append(f"  {printable(shown_path(r.id))}: measured {r.measured_step_s * 1e3:.1f} ms, before {b * 100:+.1f}%, "
                     f"after {a * 100:+.1f}%")
    lines.append(f"MAPE: before {_mape(cal.before) * 100:.1f}%, after {_mape(cal.after) * 100:.1f}%")
    return "\n".join(lines)

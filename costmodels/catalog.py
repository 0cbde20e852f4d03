"""Presets as data: GPUs, models and frameworks in `catalog/*/*.yaml`, loaded once, units converted
at load (units.parse_quantity). Users may pass their own YAML path wherever a preset name goes.
"""
from __future__ import annotations

import copy
import difflib
import functools
import json
import math
import re
import numbers
import os
import stat
from importlib import resources
from pathlib import Path

import yaml

from .errors import SpecError, UnknownPresetError, leading_zero_hint
from .memory import LAYER_SAVES
from .types import GPU, ClusterSpec, Framework, ModelSpec
from .units import parse_number, parse_price, parse_quantity, yaml_exponent_text

_KINDS = {"gpu": "gpus", "model": "models", "framework": "frameworks"}


def _catalog_dir(kind: str):
    return resources.files("costmodels") / "catalog" / _KINDS[kind]


@functools.lru_cache(maxsize=None)
def _index(kind: str) -> dict[str, str]:
    """Preset name -> YAML text, for every file of the kind."""
    out = {}
    for entry in _catalog_dir(kind).iterdir():
        if entry.name.endswith(".yaml"):
            text = entry.read_text(encoding="utf-8")
            data = _strict_load(text)
            out[data["name"]] = text
    return out


@functools.lru_cache(maxsize=None)
def _aliases(kind: str) -> dict[str, str]:
    """Lower-cased name or alias -> canonical preset name."""
    out = {}
    for name, text in _index(kind).items():
        for alias in _strict_load(text).get("aliases", []) or []:
            out[str(alias).lower()] = name
        out[name.lower()] = name
    return out


def names(kind: str) -> list[str]:
    return sorted(_index(kind))


def canonical_name(kind: str, ref: str) -> str | None:
    """The preset a name or alias refers to (case-insensitive), or None."""
    return _aliases(kind).get(str(ref).strip().lower())


MAX_INPUT_BYTES = 4 * 2**20     # a model, cluster, case or plan file is a few KiB; refuse 4 MiB and more
MAX_NESTING = 64                # YAML / JSON nesting depth (deeper input would exhaust the recursion limit)
MAX_NODES = 200_000             # YAML nodes after expanding aliases (a "billion laughs" file has 10^9)


def read_text_file(path: str | os.PathLike, what: str, limit: int = MAX_INPUT_BYTES,
                   errors: str = "strict", decode: bool = True):
    """A user's input file as text: a regular file (not a FIFO or device), at most `limit` bytes
    (MAX_INPUT_BYTES), UTF-8 (`errors="replace"` for logs, which may hold any bytes). With
    decode=False, its bytes, checked the same way (a large log is decoded line by line)."""
    if not str(path).strip():
        raise SpecError(f"the {what} path is empty; give a file")
    p = Path(path)
    try:
        st = os.stat(p)
    except FileNotFoundError:
        raise SpecError(f"{what} file '{path}' does not exist") from None
    except (OSError, ValueError) as exc:
        raise SpecError(f"cannot read {what} file '{path}': {getattr(exc, 'strerror', None) or exc}") from None
    if stat.S_ISDIR(st.st_mode):
        kind = {"log": "the log files in it (DIR/*.log)", "plan": "its plan.json"}.get(what, "a YAML file")
        raise SpecError(f"{what} '{path}' is a directory; give {kind}")
    if not stat.S_ISREG(st.st_mode):
        raise SpecError(f"{what} '{path}' is not a regular file (a device, FIFO or socket); give a file")
    if st.st_size > limit:
        kind = "input" if limit == MAX_INPUT_BYTES else what
        raise SpecError(f"{what} file '{path}' is {st.st_size / 2**20:.1f} MiB; {kind} files are limited to "
                        f"{limit // 2**20} MiB")
    try:
        with open(p, "rb") as fh:
            # what the file holds, not `limit` bytes: read(n) reserves n bytes first (1 GiB for a log)
            want = min(limit, st.st_size) + 1
            raw = fh.read(want)
            if len(raw) == want and want <= limit:          # it grew since stat: read on, to the limit
                raw += fh.read(limit + 1 - len(raw))
        if len(raw) > limit:
            raise SpecError(f"{what} file '{path}' is larger than {limit // 2**20} MiB")
        if not decode:
            return raw
        if errors == "strict" and raw.startswith(b"\xef\xbb\xbf"):
            raw = raw[3:]                 # a UTF-8 byte-order mark (Windows editors write one)
        text = raw.decode("utf-8", errors=errors)
        if errors == "strict" and "\0" in text:
            at = text.index("\0")
            raise SpecError(f"{what} file '{path}' holds a NUL byte (line {text.count(chr(10), 0, at) + 1}): it is "
                            "not a text file; save it as plain UTF-8 text")
        return text
    except UnicodeDecodeError as exc:
        utf16 = raw[:2] in (b"\xff\xfe", b"\xfe\xff")
        raise SpecError(f"{what} file '{path}' is not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset "
                        f"{exc.start}{'; it looks like UTF-16' if utf16 else ''}); save it as UTF-8") from None
    except OSError as exc:
        raise SpecError(f"cannot read {what} file '{path}': {exc.strerror or exc.__class__.__name__}") from None


def _check_yaml_shape(text: str, what: str, path) -> None:
    """Refuse YAML nested deeper than MAX_NESTING or with more than MAX_NODES nodes once aliases are
    expanded, before building it (both cost time and memory out of proportion to the file)."""
    sizes: dict[str, int] = {}
    stack: list[list] = [[0, None]]
    aliases = False
    for ev in yaml.parse(text, Loader=yaml.SafeLoader):
        if isinstance(ev, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
            stack.append([1, ev.anchor])
            if len(stack) > MAX_NESTING + 1:
                raise SpecError(f"{what} file '{path}' is nested more than {MAX_NESTING} levels deep")
        elif isinstance(ev, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
            size, anchor = stack.pop()
            if anchor:
                sizes[anchor] = size
            stack[-1][0] += size
        elif isinstance(ev, (yaml.ScalarEvent, yaml.AliasEvent)):
            if isinstance(ev, yaml.AliasEvent) and any(level[1] == ev.anchor for level in stack):
                raise SpecError(f"{what} file '{path}': alias *{str(ev.anchor)[:40]} refers to the mapping or "
                                "list that contains it (a recursive alias); write the values out")
            aliases = aliases or isinstance(ev, yaml.AliasEvent)
            size = sizes.get(ev.anchor, 1) if isinstance(ev, yaml.AliasEvent) else 1
            if isinstance(ev, yaml.ScalarEvent) and ev.anchor:
                sizes[ev.anchor] = 1
            stack[-1][0] += size
        else:
            continue
        if stack[-1][0] > MAX_NODES or sum(level[0] for level in stack) > MAX_NODES:
            if aliases:
                raise SpecError(f"{what} file '{path}' expands to more than {MAX_NODES:,} values through its "
                                "aliases (*name); write the values out once each")
            raise SpecError(f"{what} file '{path}' holds more than {MAX_NODES:,} values; a {what} file needs a "
                            "few dozen: check that this is the right file")


MAX_INPUT_INT = 10**18          # no count, size or rate an input states comes near (1 EiB is 1.2e18 B)


def _check_values(data, what: str, path, where: str = "", depth: int = 0) -> None:
    """Every string of a parsed file must be Unicode text: a YAML or JSON escape such as \\ud800 gives a
    lone surrogate, which no file or terminal can encode (it would end the run in a traceback). Every
    integer must be below MAX_INPUT_INT: larger ones overflow a float or a C long further on. JSON is
    held to the same MAX_NESTING as YAML (_check_yaml_shape)."""
    if depth > MAX_NESTING:
        raise SpecError(f"{what} file '{path}' is nested more than {MAX_NESTING} levels deep")
    if isinstance(data, int) and not isinstance(data, bool) and abs(data) >= MAX_INPUT_INT:
        digits = int(abs(data).bit_length() * 0.30103) + 1     # str() refuses more than 4,300 digits
        raise SpecError(f"{what} file '{path}'{where} holds a {digits}-digit integer, beyond "
                        "any real quantity (the limit is 10^18); check the value")
    if isinstance(data, str):
        if any("\ud800" <= ch <= "\udfff" for ch in data):
            raise SpecError(f"{what} file '{path}'{where} holds a lone surrogate escape (\\ud800-\\udfff), "
                            "which is not a character; write the text itself or drop the escape")
    elif isinstance(data, dict):
        for k, v in data.items():
            _check_values(k, what, path, where, depth + 1)
            _check_values(v, what, path, f" (key '{k}')" if isinstance(k, str) and not where else where, depth + 1)
    elif isinstance(data, list):
        for v in data:
            _check_values(v, what, path, where, depth + 1)


class _DuplicateKey(Exception):
    """A mapping that names one key twice (the loaders would keep the last value silently)."""


class _StrictLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing a key written twice in one mapping (YAML 1.2 requires keys to be
    unique; PyYAML keeps the last value silently). Keys merged in with `<<` may still be overridden,
    as YAML intends."""

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            self._check_unique(node)
        return super().construct_mapping(node, deep=deep)

    def _check_unique(self, node) -> None:
        """Refuse a key written twice in `node`, and in any mapping merged into it with `<<` (which
        PyYAML flattens without constructing)."""
        seen: dict = {}
        for key_node, value_node in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                merged = value_node.value if isinstance(value_node, yaml.SequenceNode) else [value_node]
                for sub in merged:
                    if isinstance(sub, yaml.MappingNode):
                        self._check_unique(sub)
                continue
            if key_node.tag == "tag:yaml.org,2002:value":      # '=' as a key: PyYAML reads it as a string
                key = key_node.value
            else:
                key = self.construct_object(key_node, deep=True)
            try:
                if key in seen:
                    shown = key_node.value if isinstance(key_node, yaml.ScalarNode) else key
                    raise _DuplicateKey(f"key {_shown(shown)} appears twice (lines {seen[key]} and "
                                        f"{key_node.start_mark.line + 1}); keep one")
                seen[key] = key_node.start_mark.line + 1
            except TypeError:           # an unhashable key: the base loader says so
                continue


def _no_base60(construct):
    """YAML 1.1 reads 1:30 as the base-60 number 90 (and 2:4 as 124): a time or a ratio typed without
    quotes became a wrong number silently. Read as the text it is (YAML 1.2 does the same): a sparsity
    pattern 2:4 or a note '12:30' is right, and a number field given '1:30' is refused by its own check."""
    def as_text(loader, node):
        value = str(node.value)
        if ":" in value or "_" in value or _YAML11_BASES.match(value):
            return loader.construct_scalar(node)
        return construct(loader, node)
    return as_text


# YAML 1.1's octal (010 is 8, 01024 is 532) and binary (0b101) integers: a leading zero typed by habit
# became another number silently. Read as text, as the base-60 forms are: fields that take whole
# numbers refuse the text saying which number to write (costmodels.errors.leading_zero_hint); the few
# that read quantities from text (training.total_tokens, '2T') read '0100' as 100, as YAML 1.2 does.
_YAML11_BASES = re.compile(r"[-+]?(0[0-7_]*[1-7][0-7_]*|0b[01_]+)$")     # 00 is 0 in every reading: a number


_StrictLoader.add_constructor("tag:yaml.org,2002:int", _no_base60(yaml.SafeLoader.construct_yaml_int))
_StrictLoader.add_constructor("tag:yaml.org,2002:float", _no_base60(yaml.SafeLoader.construct_yaml_float))


def _yaml12_bool(loader, node):
    """YAML 1.1 reads yes / no / on / off / y / n as booleans; YAML 1.2 only true and false. Read the
    others as the text they are, so a true-or-false field refuses them instead of guessing (as '1_2'
    is text above, not YAML 1.1's 12)."""
    value = str(node.value)
    if value.lower() in ("true", "false"):
        return yaml.SafeLoader.construct_yaml_bool(loader, node)
    return loader.construct_scalar(node)


_StrictLoader.add_constructor("tag:yaml.org,2002:bool", _yaml12_bool)


def _strict_load(text: str):
    """YAML text -> data, refusing a key written twice (`_StrictLoader`)."""
    return yaml.load(text, Loader=_StrictLoader)


def _shown(key) -> str:
    return repr(str(key)[:80]) if isinstance(key, str) else repr(key)


def read_yaml_data(path: str | os.PathLike, what: str):
    """Load a user's YAML/JSON file (any top-level type), with one-line errors for every way it can fail."""
    text = read_text_file(path, what)
    try:
        _check_yaml_shape(text, what, path)
        data = yaml.load(text, Loader=_StrictLoader)
    except _DuplicateKey as exc:
        raise SpecError(f"{what} file '{path}': {exc}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or "invalid YAML"
        raise SpecError(f"{what} file '{path}' is not valid YAML{where}: {problem}") from None
    except RecursionError:
        raise SpecError(f"{what} file '{path}' is nested too deeply") from None
    except ValueError:          # an integer literal of more than 4,300 digits (sys.int_info)
        raise SpecError(f"{what} file '{path}' holds a number too long to read; check the values") from None
    if data is None:
        raise SpecError(f"{what} file '{path}' is empty")
    try:
        _check_values(data, what, path)
    except RecursionError:
        raise SpecError(f"{what} file '{path}' is nested too deeply (or refers to itself)") from None
    return data


def read_yaml_file(path: str | os.PathLike, what: str) -> dict:
    """Load a user's YAML/JSON file into a dict, with one-line errors for every way it can fail."""
    data = read_yaml_data(path, what)
    if not isinstance(data, dict):
        raise SpecError(f"{what} file '{path}' must hold a mapping of keys, not {type(data).__name__}")
    return data


def read_json_file(path: str | os.PathLike, what: str, limit: int = MAX_INPUT_BYTES):
    """A user's JSON file (config.json, plan.json): strict JSON (no NaN / Infinity), bounded nesting."""
    text = read_text_file(path, what, limit=limit)

    def constant(name):
        raise SpecError(f"{what} file '{path}' holds {name}, which is not a number JSON allows")

    def finite(literal):
        value = float(literal)
        if not math.isfinite(value):
            raise SpecError(f"{what} file '{path}' holds {literal[:40]}, beyond any floating-point number")
        return value

    def unique(pairs):
        out = {}
        for k, v in pairs:
            if k in out:
                raise SpecError(f"{what} file '{path}': key {_shown(k)} appears twice in one object; keep one")
            out[k] = v
        return out

    try:
        data = json.loads(text, parse_constant=constant, parse_float=finite, object_pairs_hook=unique)
        _check_values(data, what, path)
        return data
    except json.JSONDecodeError as exc:
        raise SpecError(f"{what} file '{path}' is not valid JSON at line {exc.lineno}: {exc.msg}") from None
    except RecursionError:
        raise SpecError(f"{what} file '{path}' is nested too deeply") from None
    except ValueError:          # an integer literal of more than 4,300 digits (sys.int_info)
        raise SpecError(f"{what} file '{path}' holds a number too long to read; check the values") from None


def _looks_like_path(ref: str) -> bool:
    return ref.endswith((".yaml", ".yml", ".json")) or os.sep in ref or ref.startswith(".")


@functools.lru_cache(maxsize=None)
def _parsed(kind: str, name: str) -> dict:
    return _strict_load(_index(kind)[name])


def _lookup(kind: str, ref) -> dict:
    """A preset name, a file path, or an inline mapping -> the raw dict (a copy; callers may edit)."""
    if isinstance(ref, dict):
        return ref
    if not isinstance(ref, str) or not ref.strip():
        raise SpecError(f"{kind}: expected a preset name, a file path or a mapping, got {ref!r}")
    index = _index(kind)
    preset = canonical_name(kind, ref)
    if preset is not None:
        return copy.deepcopy(_parsed(kind, preset))
    if kind == "model" and Path(ref).is_dir():
        if (Path(ref) / "config.json").is_file():
            data = read_json_file(str(Path(ref) / "config.json"), kind)     # a Hugging Face checkpoint folder
            if not isinstance(data, dict):
                raise SpecError(f"model file '{Path(ref) / 'config.json'}' must hold a JSON object")
            return data
        raise SpecError(f"model folder '{ref}' has no config.json; give a model YAML file, or a "
                        "Hugging Face checkpoint folder that holds its config.json")
    if _looks_like_path(ref) or Path(ref).exists():
        return _not_a_preset_name(kind, read_yaml_file(ref, kind), ref)
    raise UnknownPresetError(kind, ref, list(index))


def _not_a_preset_name(kind: str, data, ref) -> dict:
    """A GPU or framework file of one's own must not take a catalog name or alias: plan.json, explain,
    the drift check and a calibration's scope name a GPU or framework by it, and would take the
    catalog's (a B200 file named H100-SXM was re-estimated as an H100)."""
    if kind in ("gpu", "framework") and isinstance(data, dict) and isinstance(data.get("name"), str):
        preset = canonical_name(kind, data["name"])
        if preset is not None and data != _parsed(kind, preset):     # the catalog's own file is the preset
            raise SpecError(f"{kind} file '{ref}': its name {data['name']!r} is the catalog's {preset}; plans and "
                            f"calibrations name a {kind} by it, so give your file a name of its own")
    return data


def _require(data: dict, key: str, what: str):
    if key not in data or data[key] is None:
        raise SpecError(f"{what}: missing required field '{key}'")
    return data[key]


def gpu_from_dict(d: dict) -> GPU:
    if not isinstance(d, dict):
        raise SpecError(f"GPU: expected a mapping of GPU fields, got {type(d).__name__}")
    what = f"GPU {d.get('name', '?')}"
    # a misspelt key would silently leave its default (gemm_eficiency: 0.2 planned at 0.7)
    check_known_keys(d, _GPU_KEYS, what)
    for section, known in (("peak", _GPU_PEAK_KEYS), ("system", _CLUSTER_KEYS - {"gpu"}), ("fitted", _GPU_FITTED_KEYS)):
        if isinstance(d.get(section), dict):
            check_known_keys(d[section], known, f"{what} {section}")
    peak_raw = _require(d, "peak", what)
    if not isinstance(peak_raw, dict) or not peak_raw:
        raise SpecError(f"{what}: 'peak' must map precisions (bf16, fp16, ...) to FLOP/s, e.g. bf16: 989 TFLOP/s")
    peak = {str(k): parse_quantity(v, what=f"{what} peak.{k}", dim="FLOP/s", maximum=1e18)
            for k, v in peak_raw.items()}
    if any(0 < x < 1e11 for x in peak.values()):         # 100 GFLOP/s: below any GPU of this century
        raise SpecError(f"{what}: a peak below 100 GFLOP/s is not a GPU's (got {peak_raw!r}); write it with its "
                        "unit, e.g. bf16: 989 TFLOP/s")
    low = [k for k in ("fp8", "fp6", "fp4", "int8") if peak.get(k, 0) > 0]
    if low and not any(peak.get(k, 0) > 0 for k in ("fp16", "bf16")):
        # fp8 / fp4 GEMMs run beside 16-bit attention, norms and optimizer work (compute.py): without a
        # 16-bit rate every estimate came out NaN (fuzzing round 20)
        raise SpecError(f"{what}: peak gives {', '.join(low)} but no positive bf16 or fp16 rate, which the layers "
                        f"around the low-precision GEMMs run at; add one (e.g. bf16: 989 TFLOP/s)")
    if not any(peak.get(k, 0) > 0 for k in ("fp32", "tf32", "fp16", "bf16")):
        raise SpecError(f"{what}: peak needs a positive fp32, fp16 or bf16 rate (e.g. bf16: 989 TFLOP/s), "
                        f"got {peak_raw!r}")
    system = d.get("system", {}) or {}
    fitted = d.get("fitted", {}) or {}
    if not isinstance(system, dict) or not isinstance(fitted, dict):
        raise SpecError(f"{what}: 'system' and 'fitted' must be mappings")
    q = lambda v, k, dim, positive=True: parse_quantity(v, what=f"{what} {k}", dim=dim, positive=positive,  # noqa: E731
                                                        maximum=GPU_MAXIMA.get(k))
    frac = lambda k, default: parse_number(fitted.get(k, default), what=f"{what} fitted.{k}",  # noqa: E731
                                           low=MIN_EFFICIENCY, high=1.0)
    speedup = lambda k: parse_number(fitted.get(k, 1.0), what=f"{what} fitted.{k}", low=1.0, high=16.0)  # noqa: E731
    return GPU(
        name=_printable_name(_name(_require(d, "name", what), "GPU name"), "GPU name"),
        hbm_bytes=q(_require(d, "hbm", what), "hbm", "bytes"),
        hbm_bytes_per_s=_at_least(q(_require(d, "hbm_bandwidth", what), "hbm_bandwidth", "bytes/s"), 1e9,
                                  f"{what} hbm_bandwidth", "1 GB/s"),
        peak_flop_per_s=peak,
        sparse_2to4=_flag(d.get("sparse_2to4", False), f"{what} sparse_2to4"),
        nvlink_bytes_per_s=q(system.get("nvlink_bandwidth", "0 GB/s"), "nvlink_bandwidth", "bytes/s", False),
        nvlink_domain=int(parse_number(system.get("nvlink_domain", 1), what=f"{what} nvlink_domain", low=1,
                                       high=1_000_000, integer=True)),
        network_bytes_per_s=q(system.get("network_bandwidth", "100 Gb/s"), "network_bandwidth", "bytes/s"),
        pcie_bytes_per_s=q(system.get("pcie_bandwidth", "16 GB/s"), "pcie_bandwidth", "bytes/s"),
        gemm_efficiency=frac("gemm_efficiency", 0.7),
        attention_efficiency=frac("attention_efficiency", 0.5),
        hbm_efficiency=frac("hbm_efficiency", 0.8),
        kernel_overhead_s=q(fitted.get("kernel_overhead", "5 us"), "kernel_overhead", "s", False),
        fp8_gemm_speedup=speedup("fp8_gemm_speedup"),
        sparse_gemm_speedup=speedup("sparse_gemm_speedup"),
        num_sms=int(parse_number(_require(d, "num_sms", what), what=f"{what} num_sms", low=1, high=100_000,
                                 integer=True)),
        gemm_tile_intensity=parse_number(_require(d, "gemm_tile_intensity", what),
                                         what=f"{what} gemm_tile_intensity", low=0.0, low_open=True, high=1e6),
        flash_attention_2_peak_flop_per_s=_flash_attention_2_peak(d, what),
        compute_capability=parse_number(d.get("compute_capability", 0), what=f"{what} compute_capability",
                                        low=0.0, high=100.0),
        source=str(d.get("source", "")),
    )


_GPU_KEYS = {"name", "aliases", "source", "description", "hbm", "hbm_bandwidth", "peak", "sparse_2to4", "system",
             "num_sms", "gemm_tile_intensity", "flash_attention_2_peak", "compute_capability", "fitted"}
_GPU_PEAK_KEYS = {"fp64", "fp32", "tf32", "fp16", "bf16", "fp8", "fp6", "fp4", "int8"}
_GPU_FITTED_KEYS = {"gemm_efficiency", "attention_efficiency", "hbm_efficiency", "kernel_overhead", "fp8_gemm_speedup",
                    "sparse_gemm_speedup"}
# Upper limits of a GPU file's quantities: far above any GPU, below what overflows the arithmetic.
GPU_MAXIMA = {"hbm": 2.0**50, "hbm_bandwidth": 1e15, "nvlink_bandwidth": 1e14, "network_bandwidth": 1e14,
              "pcie_bandwidth": 1e13, "kernel_overhead": 1e-3}


def gpu_to_dict(gpu: GPU, cluster: ClusterSpec | None = None) -> dict:
    """`gpu` as a GPU file's mapping (what gpu_from_dict reads back to the same GPU), with the link
    efficiencies and latencies of `cluster` in its `system` section: how plan.json keeps a GPU that is
    not the catalog's, so the plan can be explained and estimated again without its file."""
    d = {"name": gpu.name, "hbm": f"{gpu.hbm_bytes!r} B", "hbm_bandwidth": f"{gpu.hbm_bytes_per_s!r} B/s",
         "peak": {k: f"{v!r} FLOP/s" for k, v in gpu.peak_flop_per_s.items()}, "sparse_2to4": gpu.sparse_2to4,
         "num_sms": gpu.num_sms, "gemm_tile_intensity": gpu.gemm_tile_intensity,
         "fitted": {"gemm_efficiency": gpu.gemm_efficiency, "attention_efficiency": gpu.attention_efficiency,
                    "hbm_efficiency": gpu.hbm_efficiency, "kernel_overhead": f"{gpu.kernel_overhead_s!r} s",
                    "fp8_gemm_speedup": gpu.fp8_gemm_speedup, "sparse_gemm_speedup": gpu.sparse_gemm_speedup}}
    if gpu.flash_attention_2_peak_flop_per_s > 0:
        d["flash_attention_2_peak"] = f"{gpu.flash_attention_2_peak_flop_per_s!r} FLOP/s"
    if gpu.compute_capability > 0:
        d["compute_capability"] = gpu.compute_capability
    if cluster is not None:
        d["system"] = {key: f"{getattr(cluster, field)!r} {unit}" if unit else getattr(cluster, field)
                       for field, (key, unit) in LINK_CONSTANTS.items()}
    return d


# A cluster's link constants, as cluster-file keys: field of ClusterSpec -> (key, unit)
LINK_CONSTANTS = {"nvlink_efficiency": ("nvlink_efficiency", ""), "network_efficiency": ("network_efficiency", ""),
                  "nvlink_latency_s": ("nvlink_latency", "s"), "collective_latency_s": ("collective_latency", "s"),
                  "network_latency_s": ("network_latency", "s"), "cpu_adam_params_per_s": ("cpu_adam_params_per_s", "")}


def link_overrides(cluster: ClusterSpec) -> dict:
    """The link constants of `cluster` that differ from its catalog GPU's typical system, as cluster-file
    keys (a cluster file that sets nvlink_latency: 9.9 us, say); {} for a GPU the catalog does not have."""
    preset = canonical_name("gpu", cluster.gpu.name)
    if preset is None:
        return {}
    typical = load_cluster(preset)
    out = {}
    for field, (key, unit) in LINK_CONSTANTS.items():
        value = getattr(cluster, field)
        if value != getattr(typical, field):
            out[key] = f"{value!r} {unit}" if unit else value
    return out


def is_catalog_gpu(gpu: GPU) -> bool:
    """Whether `gpu` is the catalog's GPU of its name, unchanged."""
    preset = canonical_name("gpu", gpu.name)
    return preset is not None and load_gpu(preset) == gpu


def _flash_attention_2_peak(d: dict, what: str) -> float:
    """The 16-bit peak FlashAttention-2 sees on this GPU (compute.attention_rate); absent or 0: no cap."""
    if d.get("flash_attention_2_peak") is None:
        return 0.0
    value = parse_quantity(d["flash_attention_2_peak"], what=f"{what} flash_attention_2_peak", dim="FLOP/s",
                           maximum=1e18)
    if 0 < value < 1e11:           # as for the peaks: 100 GFLOP/s is below any GPU of this century
        raise SpecError(f"{what}: flash_attention_2_peak {d['flash_attention_2_peak']!r} is below 100 GFLOP/s, "
                        "no GPU's; write it with its unit (e.g. 989.4 TFLOP/s) or leave it out (no cap)")
    return value


def _at_least(value: float, low: float, what: str, shown: str) -> float:
    if value < low:
        raise SpecError(f"{what}: {value:g} B/s is below {shown}, slower than any GPU memory; check the unit")
    return value


def _name(value, what: str) -> str:
    """A name shown in reports and written into comments of launch.sh: a short one-line string, not a
    local path (no_local_path)."""
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise SpecError(f"{what}: expected a string, got {value!r}")
    text = str(value)
    if "\0" in text:
        raise SpecError(f"{what} {text!r} contains a NUL character")
    if not text.strip() or len(text) > 200:
        raise SpecError(f"{what}: expected a non-empty name of at most 200 characters, got {text[:40]!r}")
    return no_local_path(text, what)


def no_local_path(name: str, what: str) -> str:
    """`name`, refused when it holds a local absolute path ('/home/alice/gpus/h100', '~/m', 'C:\\x'):
    plan.json, report.md and launch.sh carry names, and no local path may reach them. (A path cut to its
    last part could also spell a catalog name, which a file may not take.)"""
    found = [p for p in (m.group(0) for m in _LOCAL_PATH.finditer(name))
             if len(p) > 1 and ("/" in p or "\\" in p)]      # not '~7B'
    found += ["file:" + name.lower().split("file:", 1)[1]] if "file:/" in name.lower() else []
    if found:
        raise SpecError(f"{what} {name[:60]!r} holds a local path ({found[0][:40]}), which would reach plan.json, "
                        f"report.md and launch.sh; give a short name ({without_local_paths(name)[:40]!r}, say)")
    return name


def _printable_name(text: str, what: str) -> str:
    """A name that plan.json and calib.yaml carry and compare: printable characters only (plan.json
    is read back with non-printable ones as '?', so 'A\u200bB' would no longer match its calibration)."""
    if not text.isprintable():
        raise SpecError(f"{what} {text!r} has a non-printable character (a newline, tab or invisible one); "
                        "use printable characters only")
    return text


def _flag(value, what: str) -> bool:
    if not isinstance(value, bool):
        raise SpecError(f"{what}: expected true or false, got {value!r}")
    return value


def load_gpu(ref) -> GPU:
    return gpu_from_dict(_lookup("gpu", ref))


def gpu_system_defaults(ref) -> dict:
    """The typical system a GPU ships in (DGX / HGX): nodes, links, latencies, host memory."""
    d = _lookup("gpu", ref)
    return dict(d.get("system", {}) or {})


def _bandwidth(value: float, key: str) -> float:
    if 0 < value < 1e6:
        raise SpecError(f"cluster {key}: {value:g} B/s is below 1 MB/s, slower than any interconnect; "
                        "check the unit (e.g. 400 Gb/s, 900 GB/s)")
    high = GPU_MAXIMA.get(key, 1e14)
    if value > high:
        raise SpecError(f"cluster {key}: {value:g} B/s is above {high:g} B/s, faster than any link (NVLink 5: "
                        "9e11 B/s per GPU each way); check the unit (e.g. 400 Gb/s, 900 GB/s)")
    return value


def cluster_from_dict(d: dict, gpus_per_node: int | None = None) -> ClusterSpec:
    """Cluster YAML: `gpu` (catalog name or mapping) plus overrides of its typical system; `gpus_per_node`
    (--gpus-per-node) overrides the file's node size."""
    if not isinstance(d, dict):
        raise SpecError(f"cluster: expected a GPU name, a file or a mapping, got {type(d).__name__}")
    check_known_keys(d, _CLUSTER_KEYS, "cluster")
    gpu_ref = _require(d, "gpu", "cluster")
    gpu_raw = _lookup("gpu", gpu_ref)
    gpu = gpu_from_dict(gpu_raw)
    system = dict(gpu_raw.get("system", {}) or {})
    system.update({k: v for k, v in d.items() if k != "gpu" and v is not None})
    if gpus_per_node is not None:
        system["gpus_per_node"] = gpus_per_node
    num_gpus = system.get("num_gpus", system.get("gpus_per_node", 8))
    gpn = system.get("gpus_per_node", 8)
    for key, value in (("num_gpus", num_gpus), ("gpus_per_node", gpn)):
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            raise SpecError(f"cluster: {key} must be a whole number, got {value!r}{leading_zero_hint(value)}")
    num_gpus, gpn = int(num_gpus), int(gpn)                  # numpy ints too
    domain = parse_number(system.get("nvlink_domain", gpn), what="cluster nvlink_domain", low=1,
                          high=1_000_000, integer=True)
    # An NVLink domain lies inside the nodes it was described with (DGX / HGX, the bridged pairs of PCIe
    # cards) or spans them (GB200 NVL72: 72 over nodes of 4). Inside, it shrinks with smaller nodes: 64
    # H100 as 16 nodes of 4 kept the 8-GPU domain (tp 8 across two nodes priced at NVLink speed),
    # H100-PCIe in nodes of 1 its bridged pair, a file of 8-GPU nodes with nvlink_domain 8 run with
    # --gpus-per-node 4 its 8. The nodes it was described with: the file's, where the file sets the
    # domain (else the GPU's typical system's).
    typical = gpu_raw.get("system", {}) or {}
    described_by = d if d.get("nvlink_domain") is not None else typical
    described = described_by.get("gpus_per_node", typical.get("gpus_per_node", 8))
    if gpn < domain and _inside_node(domain, described):
        domain = gpn
    bw = lambda k, default, positive=True: _bandwidth(parse_quantity(system.get(k, default),  # noqa: E731
                                                                     what=f"cluster {k}", dim="bytes/s",
                                                                     positive=positive), k)
    size = lambda k, default: _node_storage(system.get(k, default), k)  # noqa: E731
    # a latency above 1 s or a link below 1 MB/s is no interconnect (and would overflow the step time)
    latency = lambda k, default: parse_quantity(system.get(k, default), what=f"cluster {k}", dim="s",  # noqa: E731
                                                maximum=1.0)
    # an efficiency below 1% is no link (it overflowed step times into NaN and 200-digit predictions)
    frac = lambda k, default: parse_number(system.get(k, default), what=f"cluster {k}", low=MIN_EFFICIENCY,  # noqa: E731
                                           high=1.0)
    # '2.5', 2.5, '2.5 USD', 'JPY 400': an amount per GPU-hour and the currency it is in, if stated
    price, currency = parse_price(yaml_exponent_text(system.get("price_per_gpu_hour", 0.0)),
                                  "cluster price_per_gpu_hour")
    return ClusterSpec(
        gpu=gpu,
        num_gpus=num_gpus,
        gpus_per_node=gpn,
        nvlink_domain=int(domain),
        nvlink_bytes_per_s=bw("nvlink_bandwidth", "0 GB/s", False) or bw("pcie_bandwidth", "16 GB/s"),
        network_bytes_per_s=bw("network_bandwidth", "100 Gb/s"),
        nvlink_efficiency=frac("nvlink_efficiency", 0.8),
        network_efficiency=frac("network_efficiency", 0.85),
        nvlink_latency_s=latency("nvlink_latency", "5 us"),
        collective_latency_s=latency("collective_latency", "0 us"),
        network_latency_s=latency("network_latency", "10 us"),
        pcie_bytes_per_s=bw("pcie_bandwidth", "16 GB/s"),
        host_memory_bytes=size("host_memory", "1024 GiB"),
        nvme_bytes=size("nvme", "0 B"),
        nvme_bytes_per_s=_nvme_bandwidth(size("nvme", "0 B"), bw("nvme_bandwidth", "0 GB/s", False)),
        cpu_adam_params_per_s=parse_number(system.get("cpu_adam_params_per_s", 1.0e9),
                                           what="cluster cpu_adam_params_per_s", low=MIN_CPU_ADAM_PARAMS_PER_S),
        price_per_gpu_hour=price,
        price_currency=currency,
        name=_name(system.get("name", gpu.name), "cluster name"),
    )


MAX_NODE_STORAGE_BYTES = 2.0**50   # 1 PiB of host memory or NVMe per node: no server comes near
MIN_EFFICIENCY = 0.01              # a fitted or given efficiency below 1% is no GPU or link
MIN_CPU_ADAM_PARAMS_PER_S = 1.0e6  # DeepSpeed's CPU Adam runs about 1e9 parameters per second per node


def _node_storage(value, key: str) -> float:
    """Host memory or NVMe of one node, in bytes: at most MAX_NODE_STORAGE_BYTES."""
    nbytes = parse_quantity(value, what=f"cluster {key}", dim="bytes")
    if nbytes > MAX_NODE_STORAGE_BYTES:
        raise SpecError(f"cluster {key}: {value!r} per node is above 1 PiB, more than any server holds (a GB200 "
                        "NVL72 rack has 17 TB of host memory); check the value and unit (e.g. '2 TiB')")
    return nbytes


def _nvme_bandwidth(nvme_bytes: float, bytes_per_s: float) -> float:
    """NVMe read/write bandwidth per node; required where the node has NVMe (0 would make NVMe
    offload take forever instead of being refused)."""
    if nvme_bytes > 0 and bytes_per_s <= 0:
        raise SpecError("cluster nvme_bandwidth: the cluster has NVMe but no nvme_bandwidth; give the node's "
                        "NVMe bandwidth, e.g. 'nvme_bandwidth: 25 GB/s'")
    return bytes_per_s


def load_cluster(ref, num_gpus: int | None = None, gpus_per_node: int | None = None) -> ClusterSpec:
    """A GPU name (its typical node), a cluster YAML path, or a mapping; optional overrides."""
    if isinstance(ref, str) and canonical_name("gpu", ref) is not None:
        d = {"gpu": ref}
    elif isinstance(ref, dict):
        d = dict(ref)
    elif not isinstance(ref, (str, os.PathLike)):
        raise SpecError(f"cluster: expected a GPU name, a cluster file or a mapping, got {str(ref)[:60]!r}")
    else:
        raw = _lookup("gpu", ref) if isinstance(ref, str) and not _looks_like_path(ref) else None
        d = raw if raw is not None else read_yaml_file(ref, "cluster")
        if "gpu" not in d and "peak" in d:          # a GPU file given where a cluster is expected
            d = {"gpu": _not_a_preset_name("gpu", d, ref)}
    if num_gpus is not None:
        d["num_gpus"] = num_gpus
    return cluster_from_dict(d, gpus_per_node)


def _inside_node(domain, gpus_per_node) -> bool:
    """Whether an NVLink domain of `domain` GPUs, described with nodes of `gpus_per_node`, lies inside a
    node (NVSwitch boards, bridged pairs) rather than spanning nodes (rack-scale NVLink)."""
    try:
        return float(domain) <= float(gpus_per_node)
    except (TypeError, ValueError):
        return False


_MODEL_KEYS = {"name", "num_layers", "hidden", "ffn_hidden", "num_heads", "num_kv_heads", "vocab",
               "max_seq_len", "gated_mlp", "tied_embeddings", "norm", "position", "bias",
               "hidden_dropout", "attention_dropout", "rope_theta", "source"}

# Alternative spellings: the validation schema, Megatron flags, Hugging Face config.json.
_MODEL_ALIASES = {
    "hidden_size": "hidden", "ffn_hidden_size": "ffn_hidden", "intermediate_size": "ffn_hidden",
    "num_attention_heads": "num_heads", "num_key_value_heads": "num_kv_heads",
    "vocab_size": "vocab", "seq_length": "max_seq_len", "max_position_embeddings": "max_seq_len",
    "num_hidden_layers": "num_layers", "n_layer": "num_layers", "n_embd": "hidden",
    "n_head": "num_heads", "n_positions": "max_seq_len", "n_inner": "ffn_hidden",
    "tie_word_embeddings": "tied_embeddings",
}


# activation -> gated MLP (SwiGLU / GeGLU use three matrices)
_ACTIVATIONS = {"gelu": False, "gelu_new": False, "gelu_pytorch_tanh": False, "relu": False,
                "squared_relu": False, "swiglu": True, "silu": True, "swish": True, "geglu": True}
_MODEL_EXTRA_KEYS = {"activation", "aliases"}
# Fields every model file gives: what each is and the validation schema's / Megatron's spelling.
_REQUIRED_MODEL_KEYS = {"num_layers": ("the number of transformer layers", "num_hidden_layers"),
                        "hidden": ("the hidden size", "hidden_size"),
                        "num_heads": ("the number of attention heads", "num_attention_heads"),
                        "vocab": ("the vocabulary size", "vocab_size"),
                        "max_seq_len": ("the sequence length", "seq_length")}
# Keys only a Hugging Face config.json has: one of them in a file without model_type / architectures
# means a config.json whose type line is missing, not a misspelt model YAML.
_HF_MARKERS = {"hidden_act", "rms_norm_eps", "torch_dtype", "transformers_version", "bos_token_id",
               "eos_token_id", "initializer_range", "use_cache", "layer_norm_eps", "layer_norm_epsilon",
               "rope_scaling", "activation_function", "pad_token_id", "head_dim"}
_CLUSTER_KEYS = {"gpu", "num_gpus", "gpus_per_node", "nvlink_domain", "nvlink_bandwidth", "network_bandwidth",
                 "nvlink_efficiency", "network_efficiency", "nvlink_latency", "collective_latency", "network_latency",
                 "pcie_bandwidth", "host_memory", "nvme", "nvme_bandwidth", "cpu_adam_params_per_s",
                 "price_per_gpu_hour", "name", "source", "description"}
# Hugging Face keys that must hold whole numbers when present (JSON allows "4096", 32.7 and true).
_HF_INT_KEYS = ("hidden_size", "num_attention_heads", "num_hidden_layers", "intermediate_size",
                "num_key_value_heads", "vocab_size", "max_position_embeddings", "n_embd", "n_layer", "n_head",
                "n_positions", "n_inner", "d_model", "num_layers", "seq_length")
_HF_FLOAT_KEYS = ("rope_theta", "rotary_emb_base", "resid_pdrop", "hidden_dropout", "attn_pdrop",
                  "attention_dropout")
# Mixture-of-Experts keys (Mixtral, Qwen-MoE, DeepSeek, DBRX, Switch): not modelled yet.
_MOE_KEYS = ("num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts", "num_experts_per_tok",
             "ffn_config")


def check_known_keys(keys, known, what: str) -> None:
    """Refuse a key that is not in `known`, suggesting the closest one (a typo loses a setting)."""
    for key in keys:
        if key in known:
            continue
        close = difflib.get_close_matches(str(key), sorted(known), n=1, cutoff=0.6)
        hint = f"; did you mean {close[0]}?" if close else f"; known keys: {', '.join(sorted(known))}"
        raise SpecError(f"{what}: unknown key '{key}'{hint}")


# Activations config.json files name (transformers' ACT2FN and the GLU names): silu / swish / swiglu /
# geglu / reglu are gated MLPs (3 weight matrices), the rest one elementwise function between 2.
_HF_GATED_ACTIVATIONS = frozenset({"silu", "swiglu", "swish", "geglu", "reglu"})
_HF_ACTIVATIONS = _HF_GATED_ACTIVATIONS | frozenset({
    "gelu", "gelu_new", "gelu_fast", "gelu_pytorch_tanh", "gelu_python", "gelu_accurate", "gelu_10", "quick_gelu",
    "relu", "relu2", "relu6", "squared_relu", "leaky_relu", "tanh", "sigmoid", "mish", "linear", "xielu",
    "laplace", "prelu"})
_HF_NOT_DECODER = frozenset({"t5", "mt5", "umt5", "bart", "mbart", "pegasus", "marian", "bert", "roberta",
                             "deberta", "deberta-v2", "electra", "albert", "distilbert", "xlm-roberta", "whisper",
                             "longt5", "switch_transformers", "encoder-decoder", "vision-encoder-decoder",
                             "nllb", "nllb-moe", "led", "modernbert", "mpnet", "camembert", "xlm"})


# The decoder families whose config.json the reader interprets (positions, norm, MLP, tied embeddings,
# key-value heads), by model_type; a config.json that names only its class is read by that class. Other
# families are refused: read generically, BLOOM (ALiBi) was planned as a RoPE model and StarCoder /
# Falcon (multi-query attention: one key-value head) with as many key-value heads as query heads.
# "Gated by family": the class's MLP multiplies act(gate_proj x) by up_proj x whatever hidden_act names
# (transformers LlamaMLP, MistralMLP, Qwen2MLP, Qwen3MLP, Phi3MLP's fused gate_up_proj, OlmoMLP,
# Olmo2MLP, GraniteMLP); GPT-2, GPT-NeoX and Nemotron (relu2 between up_proj and down_proj) are not gated.
_HF_FAMILIES = {   # model_type: (its class in architectures, RMSNorm, tied embeddings unless told, gated by family)
    "llama": ("LlamaForCausalLM", True, False, True),
    "mistral": ("MistralForCausalLM", True, False, True),
    "qwen2": ("Qwen2ForCausalLM", True, False, True),
    "qwen3": ("Qwen3ForCausalLM", True, False, True),
    # Gemma's MLP is gated (GeGLU) although its config names the plain function (gelu_pytorch_tanh)
    "gemma": ("GemmaForCausalLM", True, True, True),
    "gemma2": ("Gemma2ForCausalLM", True, True, True),
    "gemma3_text": ("Gemma3ForCausalLM", True, True, True),
    "gpt_neox": ("GPTNeoXForCausalLM", False, False, False),
    "gpt2": ("GPT2LMHeadModel", False, True, False),
    "nemotron": ("NemotronForCausalLM", False, False, False),
    "phi3": ("Phi3ForCausalLM", True, False, True),
    "olmo": ("OlmoForCausalLM", False, False, True),
    "olmo2": ("Olmo2ForCausalLM", True, False, True),
    "granite": ("GraniteForCausalLM", True, False, True),
}
_HF_TYPES = frozenset(_HF_FAMILIES)
_HF_ARCHITECTURES = {cls: mt for mt, (cls, *_) in _HF_FAMILIES.items()}


def hf_model_type(d: dict) -> str:
    """The config.json's model family: model_type, else its class name (architectures[0]); refused
    unless the reader interprets that family (_HF_TYPES)."""
    if "model_type" in d:
        written = str(d["model_type"])
        mt = written.lower()
    else:
        arch = d.get("architectures")
        first = arch[0] if isinstance(arch, list) and arch and isinstance(arch[0], str) else None
        mt = _HF_ARCHITECTURES.get(first, "") if first else ""
        if not mt:
            raise SpecError(f"config.json: architectures {str(arch)[:60]} is not a model class the planner reads "
                            f"({', '.join(sorted(_HF_ARCHITECTURES))}); add \"model_type\" for one of "
                            f"{', '.join(sorted(_HF_TYPES))}, or describe the model in a YAML file")
    if mt not in _HF_TYPES:
        why = ("ALiBi positions" if mt in ("bloom", "mpt") or d.get("alibi") is True
               else "multi-query attention" if d.get("multi_query") is True else "its layers")
        raise SpecError(f"config.json: model_type {written[:40]!r} is not a family the planner reads ({why} would be "
                        f"misread); it reads {', '.join(sorted(_HF_TYPES))}: describe the model in a YAML file "
                        "(num_layers, hidden_size, num_attention_heads, num_kv_heads, ...) instead")
    return mt


# The names config.json files give the hidden size and the number of heads (first one present wins).
_HF_HIDDEN = ("hidden_size", "n_embd", "d_model")
_HF_HEADS = ("num_attention_heads", "n_head")


def _hf_first(d: dict, keys: tuple):
    return next((d[k] for k in keys if d.get(k) is not None), None)


def _check_hf(d: dict) -> None:
    moe = [k for k in _MOE_KEYS if d.get(k) not in (None, 0, 1)]
    if moe:
        raise SpecError(f"config.json describes a Mixture-of-Experts model ({moe[0]} = {d[moe[0]]!r}); "
                        "MoE is not supported yet, and planning it as a dense model would be wrong")
    for key in _HF_INT_KEYS:
        value = d.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise SpecError(f"config.json: {key} must be a whole number, got {value!r}{leading_zero_hint(value)}")
    for key in _HF_FLOAT_KEYS:
        value = d.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
            raise SpecError(f"config.json: {key} must be a number, got {value!r}")
    for key in ("tie_word_embeddings", "attention_bias"):
        if d.get(key) is not None and not isinstance(d[key], bool):
            raise SpecError(f"config.json: {key} must be true or false, got {d[key]!r}")
    for key in ("hidden_act", "activation_function"):
        if d.get(key) is not None and not isinstance(d[key], str):
            raise SpecError(f"config.json: {key} must be a string such as \"silu\", got {d[key]!r}")
        if d.get(key) is not None and d[key].lower() not in _HF_ACTIVATIONS:
            raise SpecError(f"config.json: {key} {d[key][:40]!r} is not an activation the planner models "
                            f"({', '.join(sorted(_HF_ACTIVATIONS))})")
    if "model_type" in d and not isinstance(d["model_type"], str):
        raise SpecError(f"config.json: model_type must be a string such as \"llama\", got {d['model_type']!r}")
    if d.get("is_encoder_decoder") is True or str(d.get("model_type", "")).lower() in _HF_NOT_DECODER:
        raise SpecError(f"config.json describes an encoder or encoder-decoder model "
                        f"({str(d.get('model_type', 'is_encoder_decoder'))[:40]}); the planner plans "
                        "decoder-only GPT-style models")
    hf_model_type(d)
    for names in (_HF_HIDDEN, _HF_HEADS,
                  ("num_hidden_layers", "n_layer", "num_layers"), ("intermediate_size", "n_inner")):
        given = {k: d[k] for k in names if d.get(k) is not None}
        if len(set(map(repr, given.values()))) > 1:
            raise SpecError(f"config.json gives {' and '.join(f'{k} = {v!r}' for k, v in given.items())}; "
                            "keep one")
    for key in _HF_INT_KEYS:
        if isinstance(d.get(key), int) and not isinstance(d.get(key), bool) and d[key] < 1:
            raise SpecError(f"config.json: {key} must be 1 or more, got {d[key]}")
    _check_hf_head_dim(d)


def _check_hf_head_dim(d: dict) -> None:
    """A head size of its own (head_dim x heads != hidden: Mistral-NeMo 12B, Qwen3-0.6B) changes the
    QKV and output projections, the attention FLOPs and the saved Q, K, V; the planner models heads of
    hidden / heads, so such a model would be planned with wrong parameters, FLOPs and memory."""
    head_dim = d.get("head_dim")
    if head_dim is None:
        return
    if isinstance(head_dim, bool) or not isinstance(head_dim, int) or head_dim < 1:
        raise SpecError(f"config.json: head_dim must be a whole number, got {str(head_dim)[:40]!r}")
    hidden = _hf_first(d, _HF_HIDDEN)
    heads = _hf_first(d, _HF_HEADS)
    if isinstance(hidden, int) and isinstance(heads, int) and heads > 0 and head_dim * heads != hidden:
        raise SpecError(f"config.json: head_dim {head_dim} differs from hidden_size / num_attention_heads "
                        f"({hidden} / {heads} = {hidden / heads:g}); a head size of its own is not supported "
                        "yet, and planning the model with heads of hidden / heads would get its parameters, "
                        "FLOPs and memory wrong")


# Model fields that hold real numbers: text PyYAML leaves of one ('5e5') is read as it (units.yaml_exponent_text).
_MODEL_FLOAT_KEYS = ("rope_theta", "hidden_dropout", "attention_dropout")


def model_from_dict(d: dict, name: str | None = None) -> ModelSpec:
    """Model YAML (our keys, the validation schema's, or a Hugging Face config.json)."""
    if not isinstance(d, dict):
        raise SpecError(f"model: expected a mapping of model fields, got {type(d).__name__}")
    if "architectures" in d or "model_type" in d:
        _check_hf(d)
        return _model_from_hf(d, name)
    known = _MODEL_KEYS | set(_MODEL_ALIASES) | _MODEL_EXTRA_KEYS
    hf_only = sorted(k for k in d if k not in known and k in _HF_MARKERS)
    if hf_only and not set(d) & (_MODEL_KEYS - {"name", "source"}):     # not our own format with a stray key
        raise SpecError(f"model: this looks like a Hugging Face config.json ({hf_only[0]}) without \"model_type\" "
                        "or \"architectures\"; add \"model_type\" (e.g. \"llama\") so it is read as one")
    check_known_keys(d, known, f"model {d.get('name', name) or ''}".strip())
    act = d.get("activation")
    if act is not None and str(act).lower() not in _ACTIVATIONS:
        raise SpecError(f"model: unknown activation {act!r}; use one of {', '.join(sorted(_ACTIVATIONS))}")
    data, named = {}, {}
    for key, value in d.items():
        field_name = _MODEL_ALIASES.get(key, key)
        if field_name in _MODEL_KEYS:
            if field_name in data and data[field_name] != value:
                raise SpecError(f"model {d.get('name', name) or ''}: {named[field_name]} = {str(data[field_name])[:40]} "
                                f"and {key} = {str(value)[:40]} name the same field; keep one")
            data[field_name], named[field_name] = value, key
    for key in _MODEL_FLOAT_KEYS:
        if data.get(key) is not None:
            data[key] = yaml_exponent_text(data[key])
    act = d.get("activation")
    if act is not None and "gated_mlp" not in data:
        data["gated_mlp"] = _ACTIVATIONS[str(act).lower()]
    data.setdefault("name", name or d.get("name") or "model")
    if isinstance(data["name"], str):
        no_local_path(data["name"], "model name")
    for key, (meaning, spelling) in _REQUIRED_MODEL_KEYS.items():
        if data.get(key) is None:
            raise SpecError(f"model {data['name']}: missing required field '{key}' ({meaning}; {spelling} is read "
                            "too); add it to the model file")
    if "num_kv_heads" not in data:
        data["num_kv_heads"] = data["num_heads"]
    if "ffn_hidden" not in data:
        # 4 x hidden (the GPT default) only from a whole number; anything else ModelSpec refuses below
        hidden = data["hidden"]
        data["ffn_hidden"] = 4 * hidden if isinstance(hidden, int) and not isinstance(hidden, bool) else hidden
    if isinstance(data.get("source"), str):
        data["source"] = without_local_paths(data["source"])
    try:
        return ModelSpec(**data)
    except TypeError as exc:
        raise SpecError(f"model {data['name']}: {exc}") from None


_LOCAL_PATH = re.compile(r"(?<![\w:/.])(?:~|[A-Za-z]:\\|/)[^\s'\"()\[\],;]*")


def without_local_paths(text: str) -> str:
    """`text` with each local absolute path ('/home/alice/ckpt/config.json', '~/x', 'C:\\x\\y') cut to its
    last part, as a config.json's _name_or_path is (_hf_model_name): a model's `source` reaches plan.json.
    URLs ('https://...') are kept."""
    return _LOCAL_PATH.sub(lambda m: m.group(0).replace("\\", "/").rstrip("/").rsplit("/", 1)[-1] or "?", text)


def _hf_model_name(name_or_path, model_type) -> str:
    """The model's name from a config.json: a hub id ('meta-llama/Llama-3.1-8B') as written, a local
    path (what save_pretrained records: '/home/alice/ckpt') reduced to its last folder, so no local
    absolute path reaches an emitted file."""
    text = str(name_or_path or "").strip()
    if not text:
        return str(model_type or "hf-model")
    local = text.startswith(("/", "~", ".", "\\")) or "\\" in text or text.count("/") > 1 or \
        (len(text) > 1 and text[1] == ":")
    if local:
        text = text.replace("\\", "/").rstrip("/").rsplit("/", 1)[-1].rsplit(":", 1)[-1]
    return text or str(model_type or "hf-model")


def _model_from_hf(d: dict, name: str | None) -> ModelSpec:
    """Hugging Face config.json: Llama / Mistral / Qwen2 (silu -> SwiGLU, RMSNorm, RoPE),
    GPT-NeoX (gelu, LayerNorm, rotary), GPT-2 (n_embd / n_layer keys, learned positions)."""
    mt = hf_model_type(d)
    get = lambda *keys, default=None: next((d[k] for k in keys if d.get(k) is not None), default)  # noqa: E731
    hidden = get(*_HF_HIDDEN)
    heads = get(*_HF_HEADS)
    layers = get("num_hidden_layers", "n_layer", "num_layers")
    what = f"config.json ({mt or 'unknown model_type'})"
    for key, value, meaning in (("hidden_size", hidden, "the hidden size"),
                                ("num_attention_heads", heads, "the number of attention heads"),
                                ("num_hidden_layers", layers, "the number of layers"),
                                ("vocab_size", get("vocab_size"), "the vocabulary size")):
        if value is None:
            raise SpecError(f"{what}: missing '{key}' ({meaning}); add it from the model's published config.json")
    act = str(get("hidden_act", "activation_function", default="gelu")).lower()
    _, rmsnorm, tied_default, gated_family = _HF_FAMILIES[mt]
    gated = (act in _HF_GATED_ACTIVATIONS or gated_family) and mt != "gpt_neox"
    ffn = get("intermediate_size", "n_inner", default=None)
    if ffn is None and mt != "gpt2":
        # Hugging Face's default is the class's (LlamaConfig 11008), not 4 x hidden; GPT-2's n_inner null
        # is documented as 4 x n_embd
        raise SpecError(f"{what}: missing 'intermediate_size' (the FFN width); add it from the model's "
                        "config (Hugging Face's default depends on the model class, so it is not assumed)")
    ffn = ffn or 4 * hidden
    gpt2 = mt == "gpt2"
    norm = "rmsnorm" if ("rms_norm_eps" in d or rmsnorm) else "layernorm"
    position = "learned" if gpt2 else "rope"
    tied = bool(get("tie_word_embeddings", default=tied_default))
    bias = gpt2 or mt == "gpt_neox" or bool(get("attention_bias", default=False))
    dropout = float(get("resid_pdrop", "hidden_dropout", default=0.0) or 0.0)
    attn_dropout = float(get("attn_pdrop", "attention_dropout", default=0.0) or 0.0)
    return ModelSpec(
        name=name or _hf_model_name(get("_name_or_path", default=None), mt),
        num_layers=int(layers), hidden=int(hidden), ffn_hidden=int(ffn), num_heads=int(heads),
        num_kv_heads=int(get("num_key_value_heads", default=heads)),
        vocab=int(get("vocab_size", default=0)) or 0,
        max_seq_len=int(get("max_position_embeddings", "n_positions", "seq_length", default=2048)),
        gated_mlp=gated, tied_embeddings=tied, norm=norm, position=position, bias=bias,
        hidden_dropout=dropout, attention_dropout=attn_dropout,
        rope_theta=float(get("rope_theta", "rotary_emb_base", default=10000.0)), source="Hugging Face config.json",
    )


def load_model(ref) -> ModelSpec:
    data = _lookup("model", ref)
    name = canonical_name("model", ref) if isinstance(ref, str) else None
    return model_from_dict(data, name=name or data.get("name"))


def framework_from_dict(d: dict) -> Framework:
    what = f"framework {d.get('name', '?')}"
    q = lambda k: parse_quantity(_require(d, k, what), what=f"{what} {k}", dim=FRAMEWORK_QUANTITIES[k][0],  # noqa: E731
                                 maximum=FRAMEWORK_QUANTITIES[k][1])
    unknown = sorted(str(k) for k in d if k not in FRAMEWORK_KEYS)
    if unknown:
        raise SpecError(f"{what}: unknown field(s) {', '.join(unknown)}; known: {', '.join(sorted(FRAMEWORK_KEYS))}")
    if d.get("attention_kernel", "flash-attention-2") not in ATTENTION_KERNELS:
        raise SpecError(f"{what}: attention_kernel must be {' or '.join(ATTENTION_KERNELS)}, "
                        f"got {d.get('attention_kernel')!r}")
    if d.get("context_parallel", "ring") not in ("ring", "ring_allgather", "ulysses"):
        raise SpecError(f"{what}: context_parallel must be ring, ring_allgather or ulysses, "
                        f"got {d.get('context_parallel')!r}")
    shards = d.get("zero0_shards_optimizer", []) or []
    if not isinstance(shards, list) or any(x not in PRECISION_NAMES for x in shards):
        raise SpecError(f"{what}: zero0_shards_optimizer must be a list of precisions "
                        f"({', '.join(PRECISION_NAMES)}), got {shards!r}")
    copies = _mapping(d, "zero0_step_copy_bytes", what)
    if any(k not in PRECISION_NAMES for k in copies):
        raise SpecError(f"{what}: zero0_step_copy_bytes keys must be precisions ({', '.join(PRECISION_NAMES)})")

    def n(key, default=None):
        """A number field: finite (zero3_live_params may be .inf), in its range (FRAMEWORK_RANGES)."""
        value = d.get(key, default) if default is not None else _require(d, key, what)
        return _framework_number(value, key, what)

    try:
        return Framework(
            name=_name(d["name"], "framework name"),
            dp_overlap=n("dp_overlap"),
            dp_overlap_zero0=n("dp_overlap_zero0"),
            attention_speedup=n("attention_speedup"),
            context_parallel=str(d.get("context_parallel", "ring")),
            attention_kernel=str(d.get("attention_kernel", "flash-attention-2")),
            deterministic_attention=_fw_flag(d, "deterministic_attention", what, False),
            fills_uninitialized_memory=_fw_flag(d, "fills_uninitialized_memory", what, False),
            pp_blocking_p2p=_fw_flag(d, "pp_blocking_p2p", what, False),
            loss_frees_before_backward=_fw_flag(d, "loss_frees_before_backward", what, False),
            offload_overlap=n("offload_overlap", 0.5),
            dp_overlap_pipelined=n("dp_overlap_pipelined"),
            tp_overlap=n("tp_overlap"),
            pp_scatter_gather=_fw_flag(d, "pp_scatter_gather", what),
            pp_overlap=n("pp_overlap"),
            zero3_gather_efficiency=n("zero3_gather_efficiency"),
            zero3_overlap=n("zero3_overlap"),
            param_gather_overlap=n("param_gather_overlap"),
            zero3_live_layers=n("zero3_live_layers"),
            zero3_live_params=n("zero3_live_params"),
            grad_buffer_follows_comm=_fw_flag(d, "grad_buffer_follows_comm", what),
            saved_activation_factor=n("saved_activation_factor"),
            fp8_saved_input_bytes=n("fp8_saved_input_bytes"),
            iteration_overhead_s=q("iteration_overhead"),
            host_overhead_s=q("host_overhead"),
            microbatch_overhead_s=q("microbatch_overhead"),
            elementwise_traffic=n("elementwise_traffic"),
            state_bytes=_state_bytes(d, what),
            state_bytes_zero0=_state_bytes(d, what, "state_bytes_zero0") if "state_bytes_zero0" in d
            else _state_bytes(d, what),
            zero0_shards_optimizer=tuple(d.get("zero0_shards_optimizer", []) or []),
            zero0_step_copy_bytes={str(k): _framework_number(v, f"zero0_step_copy_bytes.{k}", what)
                                   for k, v in _mapping(d, "zero0_step_copy_bytes", what).items()},
            fsdp_pp_unsharded=_fw_flag(d, "fsdp_pp_unsharded", what, False),
            cpu_offloading=_fw_flag(d, "cpu_offloading", what, False),
            fused_softmax_max_seq=n("fused_softmax_max_seq", 0.0),
            zero3_recompute_gathers=n("zero3_recompute_gathers", 1.0),
            zero3_gathers_per_layer=n("zero3_gathers_per_layer", 1.0),
            zero3_reduce_bucket_params=_bucket(n("zero3_reduce_bucket_params", 0.0), what),
            zero3_rank_loop_host=_rank_loop(d, "host", what),
            zero3_rank_loop_copies=_rank_loop(d, "copies", what),
            zero3_reduce_tensors_per_layer=n("zero3_reduce_tensors_per_layer", 0.0),
            zero3_module_hooks_forward=_module_hooks(d, "forward", what),
            zero3_module_hooks_backward=_module_hooks(d, "backward", what),
            grad_accumulation_bytes=n("grad_accumulation_bytes"),
            zero_gradient_bytes=_zero_gradient_bytes(d, what),
            layer_saves=_layer_saves(d, what),
            zero_step_gradient_bytes=_zero_step_bytes(d, "gradient_partition", what),
            zero_step_copy_bytes=_zero_step_bytes(d, "flat_copies", what),
            allocator_fragmentation=n("allocator_fragmentation"),
            cuda_context_bytes=q("cuda_context"),
            comm_buffer_bytes=q("comm_buffers"),
            comm_buffer_bytes_by_zero=_comm_buffers_by_zero(d, what),
            logits_bytes_per_element=n("logits_bytes_per_element"),
            logits_bytes_per_element_tp=n("logits_bytes_per_element_tp") if "logits_bytes_per_element_tp" in d else None,
            attention_head_dims=_head_dims(d, what),
            source=str(d.get("source", "")),
        )
    except KeyError as exc:
        raise SpecError(f"{what}: missing required field {exc}") from None


# (low, high, low exclusive) of framework number fields; anything not listed: [0, 1e12].
FRAMEWORK_RANGES = {
    **{k: (0.0, 1.0, False) for k in ("dp_overlap", "dp_overlap_zero0", "dp_overlap_pipelined", "tp_overlap",
                                       "pp_overlap", "zero3_overlap", "param_gather_overlap", "offload_overlap")},
    "zero3_gather_efficiency": (0.0, 1.0, True),
    "elementwise_traffic": (0.0, 100.0, True), "saved_activation_factor": (0.0, 100.0, True),
    "allocator_fragmentation": (0.0, 10.0, False), "zero3_live_params": (0.0, math.inf, False),
    "attention_speedup": (0.01, 100.0, False), "grad_accumulation_bytes": (0.0, 64.0, False),
    "zero_gradient_bytes": (0.0, 256.0, False),
    "logits_bytes_per_element": (0.0, 64.0, False), "logits_bytes_per_element_tp": (0.0, 64.0, False),
    "fp8_saved_input_bytes": (0.0, 8.0, False),
    "state_bytes": (0.0, 64.0, False), "zero0_step_copy_bytes": (0.0, 256.0, False),
    "zero_step_bytes": (0.0, 64.0, False),
    "zero3_recompute_gathers": (0.0, 10.0, False), "zero3_gathers_per_layer": (0.0, 1000.0, False),
    "zero3_reduce_tensors_per_layer": (0.0, 1000.0, False), "zero3_live_layers": (0.0, 1e6, False),
    "fused_softmax_max_seq": (0.0, 1e9, False),
}
# (dimension, maximum) of the framework's quantities with a unit.
FRAMEWORK_QUANTITIES = {"iteration_overhead": ("s", 10.0), "host_overhead": ("s", 0.01),
                        "microbatch_overhead": ("s", 1.0), "cuda_context": ("bytes", 2.0**40),
                        "comm_buffers": ("bytes", 2.0**40)}
PRECISION_NAMES = ("fp32", "fp16", "bf16", "fp8")
# What a framework's flash attention runs on (Framework.attention_kernel).
ATTENTION_KERNELS = ("flash-attention-2", "native")
FRAMEWORK_KEYS = frozenset({
    "name", "source", "aliases", "dp_overlap", "dp_overlap_zero0", "dp_overlap_pipelined", "tp_overlap",
    "pp_scatter_gather", "pp_overlap", "pp_blocking_p2p", "attention_speedup", "attention_kernel", "attention_head_dims",
    "deterministic_attention", "fills_uninitialized_memory",
    "context_parallel",
    "offload_overlap", "zero3_gather_efficiency", "zero3_overlap", "param_gather_overlap", "zero3_live_layers",
    "zero3_recompute_gathers", "zero3_gathers_per_layer", "zero3_reduce_bucket_params",
    "zero3_reduce_tensors_per_layer", "zero3_rank_loop", "zero3_module_hooks", "zero3_live_params", "grad_buffer_follows_comm",
    "saved_activation_factor", "fp8_saved_input_bytes", "iteration_overhead", "microbatch_overhead", "zero_gradient_bytes",
    "host_overhead", "elementwise_traffic", "grad_accumulation_bytes", "state_bytes", "state_bytes_zero0",
    "zero0_shards_optimizer", "zero0_step_copy_bytes", "fsdp_pp_unsharded", "cpu_offloading", "fused_softmax_max_seq", "allocator_fragmentation",
    "cuda_context", "comm_buffers", "logits_bytes_per_element", "logits_bytes_per_element_tp", "layer_saves",
    "zero_step_bytes", "comm_buffers_by_zero_stage", "loss_frees_before_backward"})


def _layer_saves(d: dict, what: str) -> tuple[str, ...]:
    saves = d.get("layer_saves", []) or []
    if not isinstance(saves, list) or any(x not in LAYER_SAVES for x in saves):
        raise SpecError(f"{what}: layer_saves must be a list of {', '.join(LAYER_SAVES)}, got {saves!r}")
    return tuple(saves)


def _comm_buffers_by_zero(d: dict, what: str) -> tuple | None:
    """`comm_buffers_by_zero_stage: {0: 0 B, 1: 2e9 B, 2: 2e9 B, 3: 1e9 B}`, every stage named."""
    if "comm_buffers_by_zero_stage" not in d:
        return None
    table = _mapping(d, "comm_buffers_by_zero_stage", what)
    if sorted(table) != [0, 1, 2, 3]:
        raise SpecError(f"{what}: comm_buffers_by_zero_stage must name ZeRO stages 0, 1, 2 and 3, got "
                        f"{', '.join(map(str, sorted(table, key=str))) or 'none'}")
    return tuple(parse_quantity(table[z], what=f"{what} comm_buffers_by_zero_stage.{z}", dim="bytes",
                                maximum=FRAMEWORK_QUANTITIES["comm_buffers"][1]) for z in range(4))


ZERO_STEP_PARTS = ("gradient_partition", "flat_copies")


def _zero_step_bytes(d: dict, part: str, what: str) -> float:
    parts = _mapping(d, "zero_step_bytes", what)
    unknown = sorted(str(k) for k in parts if k not in ZERO_STEP_PARTS)
    if unknown:
        raise SpecError(f"{what}: zero_step_bytes takes {' and '.join(ZERO_STEP_PARTS)}, not {', '.join(unknown)}")
    return _framework_number(parts.get(part, 0.0), f"zero_step_bytes.{part}", what)


def _bucket(value: float, what: str) -> float:
    if 0.0 < value < 1.0:
        raise SpecError(f"{what}: zero3_reduce_bucket_params is {value!r}; expected 0 (one call per gather unit) "
                        "or a bucket of at least 1 parameter")
    return value


def _fw_flag(d: dict, key: str, what: str, default=None) -> bool:
    value = d.get(key, default) if default is not None else _require(d, key, what)
    if not isinstance(value, bool):
        raise SpecError(f"{what}: {key} must be true or false, got {value!r}")
    return value


def _framework_number(value, key: str, what: str) -> float:
    low, high, open_low = FRAMEWORK_RANGES.get(key.split(".")[0], (0.0, 1e12, False))
    if isinstance(value, str):              # PyYAML reads 1.0e9 (no exponent sign) as a string
        try:
            value = float(value.strip())
        except ValueError:
            raise SpecError(f"{what}: {key} must be a number, got {value[:40]!r}") from None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise SpecError(f"{what}: {key} must be a number, got {value!r}")
    x = float(value)
    if math.isnan(x) or (math.isinf(x) and high != math.inf) or x < low or x > high or (open_low and x == low):
        bounds = f"({low:g}, {high:g}]" if open_low else f"[{low:g}, {high:g}]"
        raise SpecError(f"{what}: {key} is {value!r}; expected a number in {bounds}")
    return x


def _mapping(d: dict, key: str, what: str) -> dict:
    value = d.get(key) or {}
    if not isinstance(value, dict):
        raise SpecError(f"{what}: {key} must be a mapping")
    return value


def _rank_loop(d: dict, key: str, what: str) -> float:
    """`zero3_rank_loop: {host: x, copies: y}`: work per rank and ZeRO-3 call."""
    return _counts(d, "zero3_rank_loop", ("host", "copies"), key, what)


def _module_hooks(d: dict, key: str, what: str) -> float:
    """`zero3_module_hooks: {forward: x, backward: y}`: host time per module and pass, in counted kernels."""
    return _counts(d, "zero3_module_hooks", ("forward", "backward"), key, what)


def _zero_gradient_bytes(d: dict, what: str) -> dict:
    """`zero_gradient_bytes: {zero2: {fp32: {each: a, partition: b}, 16bit: {...}}, zero3: {...}}` ->
    {"zero2/fp32/each": a, ...}."""
    table = d.get("zero_gradient_bytes") or {}
    shape = "{zero2: {fp32: {each: a, partition: b}, 16bit: {...}}, zero3: {...}}"
    if not isinstance(table, dict) or set(table) - {"zero2", "zero3"}:
        raise SpecError(f"{what}: zero_gradient_bytes must be {shape}")
    out = {}
    for stage, by_comm in table.items():
        if not isinstance(by_comm, dict) or set(by_comm) != {"fp32", "16bit"}:
            raise SpecError(f"{what}: zero_gradient_bytes.{stage} must map fp32 and 16bit as in {shape}")
        for comm, parts in by_comm.items():
            if not isinstance(parts, dict) or set(parts) != {"each", "partition"}:
                raise SpecError(f"{what}: zero_gradient_bytes.{stage}.{comm} must map each and partition to numbers")
            for part, value in parts.items():
                out[f"{stage}/{comm}/{part}"] = _framework_number(value, f"zero_gradient_bytes.{stage}.{comm}.{part}",
                                                                  what)
    return out


def _counts(d: dict, name: str, keys: tuple[str, str], key: str, what: str) -> float:
    """One number in [0, 100] of a framework mapping `name: {keys[0]: x, keys[1]: y}` (0 where absent)."""
    table = d.get(name) or {}
    if not isinstance(table, dict) or set(table) - set(keys):
        raise SpecError(f"{what}: {name} must map {keys[0]} and {keys[1]} to numbers")
    value = table.get(key, 0.0)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= float(value) <= 100.0:
        raise SpecError(f"{what}: {name}.{key} must be a number in [0, 100], got {value!r}")
    return float(value)


def _head_dims(d: dict, what: str) -> tuple[int, ...]:
    dims = d.get("attention_head_dims") or []
    if not isinstance(dims, list) or not all(isinstance(x, int) and not isinstance(x, bool) and 0 < x <= 1024
                                             for x in dims):
        raise SpecError(f"{what}: attention_head_dims must be a list of whole numbers from 1 to 1024")
    return tuple(sorted(dims))


def _state_bytes(d: dict, what: str, key: str = "state_bytes") -> dict:
    table = _require(d, key, what)
    out = {}
    for precision in ("fp32", "fp16", "bf16", "fp8"):
        row = table.get(precision) if isinstance(table, dict) else None
        if not isinstance(row, dict) or not {"weights", "grads", "optimizer"} <= set(row):
            raise SpecError(f"{what}: {key}.{precision} needs weights, grads and optimizer")
        out[precision] = tuple(_framework_number(row[k], f"{key}.{precision}.{k}", what)
                               for k in ("weights", "grads", "optimizer"))
    return out


@functools.lru_cache(maxsize=None)
def _framework_preset(name: str) -> Framework:
    return framework_from_dict(_lookup("framework", name))


def framework_dict(name: str) -> dict:
    """The raw mapping of a framework preset (a copy), to derive a variant from."""
    return _lookup("framework", name)


def load_framework(ref) -> Framework:
    if isinstance(ref, str) and canonical_name("framework", ref) is not None:
        return _framework_preset(canonical_name("framework", ref))
    return framework_from_dict(_lookup("framework", ref))

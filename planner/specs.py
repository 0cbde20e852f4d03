"""User input -> core types: case YAML, model / cluster references, layout sections.

A case has `model`, `cluster` and `parallel` sections in the schema of
../shared/validation/README.md; `model` and `cluster` may also be a preset name or a file path.
Optional `training` (`total_tokens`, `framework`) and top-level `framework`.
Every field a case leaves out takes a documented default, and `Case.defaults` says which.
"""
from __future__ import annotations

import os

import re
from dataclasses import dataclass, field
from pathlib import Path

from costmodels import catalog
from costmodels.errors import SpecError, leading_zero_hint
from costmodels.types import (ClusterSpec, Framework, GradComm, Layout, ModelSpec, Offload, Precision,
                              Recompute, Sparsity, TrainingSpec, flash_attention_runs)
from costmodels.units import parse_quantity
from search_spaces.knobs import BY_CASE_KEY, CASE_DEFAULTS
from search_spaces.knobs import CASE_KEYS as PARALLEL_KEYS
from search_spaces.layouts import data_parallel, sparsity_density

DEFAULT_FRAMEWORK = "megatron-deepspeed"

# The `parallel` keys a case may give, and the defaults of those it may leave out (documented in
# README "Case files"), come from the knob table (search_spaces/knobs.py).
# Fields whose defaults are noted after the others when a case leaves them out, in this order.
_NOTED_LAST = ("recompute", "sequence_parallel", "offload_optimizer", "offload_params", "offload_activations",
               "sparsity", "grad_comm")


CASE_KEYS = {"model", "cluster", "parallel", "training", "framework", "name", "description"}
TRAINING_KEYS = {"total_tokens", "framework"}
_PLAIN_NUMBER = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


@dataclass(frozen=True)
class Case:
    model: ModelSpec
    cluster: ClusterSpec
    layout: Layout
    framework: Framework
    training: TrainingSpec
    defaults: tuple[str, ...] = field(default=())
    warnings: tuple[tuple[str, str, str], ...] = field(default=())   # (kind, message, suggestion)


# A Hugging Face config.json gives the longest sequence the model supports (max_position_embeddings:
# 32,768 for Mistral, 131,072 for Qwen2 and Llama 3.1), not the length it was pre-trained at. Without
# --seq-len the planner trains at min(max_position_embeddings, HF_TRAINING_SEQ_LEN) and says so.
HF_TRAINING_SEQ_LEN = 4096
HF_SOURCE = "Hugging Face config.json"
# model_type values whose attention has query/key/value biases but no other linear biases.
QKV_BIAS_MODEL_TYPES = ("qwen2", "qwen2_vl", "qwen")


def default_seq_len(model: ModelSpec) -> tuple[int, str]:
    """The training sequence length used when none is given, and why (for the defaults shown)."""
    if model.source == HF_SOURCE and model.max_seq_len > HF_TRAINING_SEQ_LEN:
        return HF_TRAINING_SEQ_LEN, (f"min(max_position_embeddings {model.max_seq_len:,}, {HF_TRAINING_SEQ_LEN}) "
                                     "for a Hugging Face config")
    return model.max_seq_len, "the model's"


def model_warnings(data: dict, model: ModelSpec) -> list[tuple[str, str, str]]:
    """(kind, message, suggestion) for what a Hugging Face config holds that the target cannot express."""
    # a config.json names its family; the planner's own model mapping (plan.json) does not
    hf = model.source == HF_SOURCE and ("model_type" in data or "architectures" in data)
    mt = catalog.hf_model_type(data) if hf else ""
    out = []
    if mt in QKV_BIAS_MODEL_TYPES and not model.bias:
        out.append(("model", f"{model.name} ({mt}) has biases on the query/key/value projections; "
                    "Megatron-DeepSpeed at the pinned commit has no flag for them (--add-qkv-bias is "
                    "Megatron-LM's), so the job is written with --disable-bias-linear and trains the model "
                    "without QKV biases (it cannot load Qwen2 weights); the estimate counts no biases",
                    "accept the bias-free variant (fine for pre-training from scratch); to keep the biases, "
                    "train with Megatron-LM (--add-qkv-bias), which --framework megatron-lm plans for but "
                    "writes no job for"))
    return out


def load_model(ref, warnings: list | None = None) -> ModelSpec:
    """Preset name, YAML / config.json path, or mapping. What the target cannot express is appended
    to `warnings` as (kind, message, suggestion)."""
    if isinstance(ref, os.PathLike):
        ref = os.fspath(ref)              # a pathlib.Path, as cluster=, case= and out= take
    folder = isinstance(ref, str) and catalog.canonical_name("model", ref) is None and Path(ref).is_dir() \
        and (Path(ref) / "config.json").is_file()
    if folder:
        ref = str(Path(ref) / "config.json")       # a checkpoint folder: its config.json, read as JSON
    if isinstance(ref, str) and ref.lower().endswith(".json") and Path(ref).exists():
        data = catalog.read_json_file(ref, "model")
        if not isinstance(data, dict):
            raise SpecError(f"model file '{ref}' must hold a JSON object")
        path = Path(ref)
        # a folder is named as catalog.load_model names it (a "name" key, else _name_or_path), a file by its folder
        name = data.get("name") if folder else path.parent.name if path.stem == "config" and path.parent.name \
            else path.stem
        model = catalog.model_from_dict(data, name=name)
        if warnings is not None:
            warnings.extend(model_warnings(data, model))
        return model
    if isinstance(ref, dict):
        model = catalog.load_model(ref)
        if warnings is not None:
            warnings.extend(model_warnings(ref, model))
        return model
    return catalog.load_model(ref)


def load_cluster(ref, num_gpus: int | None = None, gpus_per_node: int | None = None) -> ClusterSpec:
    try:
        return catalog.load_cluster(ref, num_gpus=num_gpus, gpus_per_node=gpus_per_node)
    except SpecError as exc:
        m = re.search(r"(\d+) GPUs is not a whole number of (\d+)-GPU nodes", str(exc))
        if not m or gpus_per_node is not None:
            raise
        n, g = int(m.group(1)), int(m.group(2))
        fits = [d for d in range(g - 1, 0, -1) if n % d == 0][:1]
        lower, upper = n // g * g, -(-n // g) * g
        options = [f"--gpus {v}" for v in (lower, upper) if v > 0]
        hint = (f"; for nodes of {fits[0]} GPUs give --gpus-per-node {fits[0]}" if fits else "") + \
            (f", or use {' or '.join(options)}" if options else "")
        raise SpecError(f"{str(exc).splitlines()[0]}{hint}") from None


def alias_note(kind: str, ref) -> str | None:
    """'cluster H100 means the catalog's H100-SXM' when a name is an alias, not the preset's own name."""
    if not isinstance(ref, str):
        return None
    name = catalog.canonical_name(kind, ref)
    if name is None or name.lower() == ref.strip().lower():
        return None
    return f"{'cluster' if kind == 'gpu' else kind} '{ref}' means the catalog's {name} (an alias)"


def _int(section: dict, key: str, what: str, default=None):
    value = section.get(key, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, float) and value.is_integer():
            return int(value)
        raise SpecError(f"{what}.{key} must be a whole number, got {value!r}{leading_zero_hint(value)}")
    return value


def _bool(section: dict, key: str, what: str, default):
    value = section.get(key)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise SpecError(f"{what}.{key} must be true or false, got {value!r}")
    return value


def _name(section: dict, key: str, what: str, default: str, allow_bool: bool = False) -> str:
    """A field that names a choice (precision, recompute, offload, sparsity, grad_comm): a non-empty
    string (`recompute`, the offloads and `sparsity` also take YAML's true / false / off / no, read as
    their documented aliases: recompute true = full, false = none; offload and sparsity false = none /
    dense, true refused by the parser), or
    `default` when the field is absent. A number, a list or an empty string is refused, not read as
    the default or as its text."""
    value = section.get(key)
    if value is None:
        return default
    if isinstance(value, bool) and allow_bool:
        return str(value).lower()
    if not isinstance(value, str) or not value.strip():
        hint = (" (YAML reads an unquoted 2:4 as the number 124: write '2:4' in quotes)"
                if key == "sparsity" and value == 124 else "")
        raise SpecError(f"{what}.{key} must be a name such as {default!r}, got {value!r}{hint}")
    return value


def layout_from_dict(section: dict, model: ModelSpec, cluster: ClusterSpec | None,
                     defaults: list[str] | None = None) -> Layout:
    """The `parallel` section -> Layout; missing fields take the knob table's defaults (recorded in
    `defaults`)."""
    what = "parallel"
    if not isinstance(section, dict):
        raise SpecError("parallel: expected a mapping of layout fields (tp, pp, dp, ...)")
    unknown = set(section) - PARALLEL_KEYS
    if unknown:
        raise SpecError(f"parallel: unknown field(s) {', '.join(sorted(str(k)[:40] for k in unknown))}; "
                        f"known: {', '.join(sorted(PARALLEL_KEYS))}")
    used = defaults if defaults is not None else []

    def take(key, fallback):
        if section.get(key) is None:
            used.append(f"{what}.{key} = {fallback}")
            return fallback
        return section[key]

    def given(key):
        """The key the case uses for this field (its own or an alias), or None."""
        return next((name for name in BY_CASE_KEY[key].case_keys if section.get(name) is not None), None)

    def whole(key):
        name = given(key)
        return _int(section, name, what) if name else int(take(key, CASE_DEFAULTS[key]))

    tp = whole("tp")
    pp = whole("pp")
    cp = whole("cp")
    dp = _int(section, "dp", what)
    if dp is None:
        if cluster is None:
            dp = 1
            used.append(f"{what}.dp = 1")
        else:
            dp = data_parallel(cluster.num_gpus, tp, pp, cp)
            if not dp:
                raise SpecError(f"parallel: tp*pp*cp = {tp * pp * cp} does not divide the cluster's "
                                f"{cluster.num_gpus} GPUs; give dp or change the cluster size")
            used.append(f"{what}.dp = {dp} (GPUs / (tp*pp*cp))")
    vpp = whole("vpp")
    mbs = whole("micro_batch")
    gbs = _int(section, given("global_batch"), what) if given("global_batch") else None
    if gbs is None:
        gbs = mbs * dp
        used.append(f"{what}.global_batch = {gbs} (micro_batch x dp)")
    seq = _int(section, given("seq_len"), what) if given("seq_len") else None
    if seq is None:
        seq, why = default_seq_len(model)
        used.append(f"{what}.seq_len = {seq} ({why})")
    zero = _int(section, given("zero_stage"), what) if given("zero_stage") else None
    if zero is None:
        zero = CASE_DEFAULTS["zero_stage"]
        used.append(f"{what}.zero_stage = {zero}")
    precision = _name(section, "precision", what, "bf16") if section.get("precision") is not None else None
    if precision is None:
        supports_bf16 = cluster is None or cluster.gpu.supports(Precision.BF16)
        precision = "bf16" if supports_bf16 else "fp16"
        used.append(f"{what}.precision = {precision}")
    flash_default = cluster is None or flash_attention_runs(model, cluster.gpu)
    flash = _bool(section, "flash_attention", what, None)
    if flash is None:
        flash = flash_default
        used.append(f"{what}.flash_attention = {str(flash).lower()}")
    for key in _NOTED_LAST:
        if section.get(key) is None:
            used.append(f"{what}.{key} = {str(CASE_DEFAULTS[key]).lower()}")
    sparsity = Sparsity.parse(_name(section, "sparsity", what, CASE_DEFAULTS["sparsity"], allow_bool=True))
    density = section.get("density")
    follows = float(sparsity_density(sparsity.code))
    if density is None:
        density = follows
    elif isinstance(density, bool) or not isinstance(density, (int, float)):
        raise SpecError(f"{what}.density must be a number between 0 and 1, got {density!r}")
    elif density != follows and sparsity is not Sparsity.UNSTRUCTURED:
        # the share of kept weights follows from `sparsity` (plan.json records it); a density of its own
        # was accepted and ignored (fuzzing round 7)
        raise SpecError(f"{what}.density {density!r} does not match sparsity {sparsity.value} (density {follows:g}): "
                        "the density follows from sparsity (dense 1, 2:4 0.5); remove density or set sparsity")
    try:
        return Layout(
            tp=tp, pp=pp, dp=dp, cp=cp, vpp=vpp, mbs=mbs, gbs=gbs, seq_len=seq, zero=int(zero),
            offload_optimizer=Offload.parse(_name(section, "offload_optimizer", what, CASE_DEFAULTS["offload_optimizer"],
                                                  allow_bool=True)),
            offload_params=Offload.parse(_name(section, "offload_params", what, CASE_DEFAULTS["offload_params"],
                                               allow_bool=True)),
            offload_activations=Offload.parse(_name(section, "offload_activations", what,
                                                    CASE_DEFAULTS["offload_activations"], allow_bool=True)),
            recompute=Recompute.parse(_name(section, "recompute", what, CASE_DEFAULTS["recompute"], allow_bool=True)),
            recompute_layers=_int(section, "recompute_layers", what, CASE_DEFAULTS["recompute_layers"]),
            first_stage_layers=_int(section, "first_stage_layers", what, CASE_DEFAULTS["first_stage_layers"]),
            last_stage_layers=_int(section, "last_stage_layers", what, CASE_DEFAULTS["last_stage_layers"]),
            cpu_offload_layers=_int(section, "cpu_offload_layers", what, CASE_DEFAULTS["cpu_offload_layers"]),
            sequence_parallel=_bool(section, "sequence_parallel", what, CASE_DEFAULTS["sequence_parallel"]),
            tp_comm_overlap=_bool(section, "tp_comm_overlap", what, CASE_DEFAULTS["tp_comm_overlap"]),
            flash_attention=bool(flash),
            precision=Precision.parse(precision),
            sparsity=sparsity, density=float(density),
            grad_comm=GradComm.parse(_name(section, "grad_comm", what, CASE_DEFAULTS["grad_comm"])),
        )
    except (TypeError, ValueError) as exc:
        raise SpecError(f"parallel: {exc}") from None


def _section(data: dict, key: str, required: bool = True):
    if key not in data or data[key] is None:
        if required:
            raise SpecError(f"case: missing '{key}' section (a preset name, a file path or a mapping)")
        return None
    return data[key]


def case_from_dict(data: dict, base_dir: Path | None = None) -> Case:
    """A parsed case mapping -> Case. Relative file references resolve against `base_dir`."""
    if not isinstance(data, dict):
        raise SpecError("case: expected a mapping with model, cluster and parallel sections")
    catalog.check_known_keys(data, CASE_KEYS, "case")
    if isinstance(data.get("training"), dict):
        catalog.check_known_keys(data["training"], TRAINING_KEYS, "training")
    defaults: list[str] = []

    def resolve(ref, kind="model"):
        """A file named in a case file is relative to the case file, never to the working directory (the
        same case meant another model from another folder); a preset name stays a name."""
        if isinstance(ref, str) and base_dir is not None and catalog.canonical_name(kind, ref) is None:
            candidate = base_dir / ref
            looks_like_file = "/" in ref or os.sep in ref or ref.lower().endswith((".yaml", ".yml", ".json"))
            if candidate.exists() or looks_like_file:
                return str(candidate)
        return ref

    model_ref = _section(data, "model")
    model_warns: list = []
    model = load_model(resolve(model_ref) if not isinstance(model_ref, dict) else model_ref, model_warns)
    cluster_raw = _section(data, "cluster")
    parallel = _section(data, "parallel", required=False) or {}
    if isinstance(cluster_raw, dict):
        cluster_dict = {k: v for k, v in cluster_raw.items() if k not in ("intra_node", "inter_node")}
        if "gpu" in cluster_dict and isinstance(cluster_dict["gpu"], str):
            name = catalog.canonical_name("gpu", cluster_dict["gpu"])
            path = None if name else resolve(cluster_dict["gpu"], "gpu")
            if name is None and not Path(str(path)).exists():
                from costmodels.errors import UnknownPresetError
                raise UnknownPresetError("GPU", cluster_dict["gpu"], catalog.names("gpu"))
            cluster_dict["gpu"] = name or path
        if "num_gpus" not in cluster_dict and isinstance(parallel, dict):
            world = 1
            for key in ("tp", "pp", "dp", "cp"):
                world *= _int(parallel, key, "parallel", 1) or 1
            cluster_dict["num_gpus"] = world
            defaults.append(f"cluster.num_gpus = {world} (tp*pp*dp*cp)")
        if cluster_dict.get("gpus_per_node") is None:
            cluster_dict.pop("gpus_per_node", None)
        cluster = catalog.cluster_from_dict(cluster_dict)
    else:
        world = None
        if isinstance(parallel, dict) and all(parallel.get(k) for k in ("tp", "pp", "dp")):
            world = 1
            for key in ("tp", "pp", "dp", "cp"):
                world *= _int(parallel, key, "parallel", 1) or 1
        cluster = load_cluster(resolve(cluster_raw), num_gpus=world)
    layout = layout_from_dict(parallel, model, cluster, defaults)
    if layout.world != cluster.num_gpus:
        raise SpecError(f"parallel: tp*pp*dp*cp = {layout.world} GPUs but the cluster has {cluster.num_gpus}; "
                        "make them equal")
    training_raw = data.get("training") or {}
    if not isinstance(training_raw, dict):
        raise SpecError("training: expected a mapping (total_tokens, framework)")
    if (data.get("framework") is not None and training_raw.get("framework") is not None
            and catalog.load_framework(data["framework"]).name
            != catalog.load_framework(training_raw["framework"]).name):
        raise SpecError(f"framework {str(data['framework'])[:40]!r} and training.framework "
                        f"{str(training_raw['framework'])[:40]!r} name two frameworks; keep one")
    fw_name = data.get("framework") if "framework" in data else training_raw.get("framework")
    if isinstance(fw_name, str) and not fw_name.strip():
        raise SpecError("framework: an empty name; give a preset (megatron-deepspeed, ...) or a framework "
                        "file, or leave the key out for the default")
    if fw_name is None:
        fw_name = DEFAULT_FRAMEWORK
        defaults.append(f"framework = {DEFAULT_FRAMEWORK}")
    framework = catalog.load_framework(fw_name)
    total_tokens = training_raw.get("total_tokens", 0.0)
    if isinstance(total_tokens, str) and not _PLAIN_NUMBER.fullmatch(total_tokens.strip()):
        raise SpecError(f"training.total_tokens must be a plain number of tokens such as 300e9 or "
                        f"300000000000 (no unit), got {total_tokens[:40]!r}")
    training = TrainingSpec(total_tokens=parse_quantity(total_tokens, what="training.total_tokens",
                                                          minimum=0.0),
                            framework=framework.name)
    return Case(model=model, cluster=cluster, layout=layout, framework=framework, training=training,
                defaults=tuple(defaults), warnings=tuple(model_warns))


def load_case(path) -> Case:
    data = catalog.read_yaml_file(path, "case")
    return case_from_dict(data, base_dir=Path(path).parent)

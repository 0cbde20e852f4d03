"""The knob table: one row per Layout field, the only place a knob is described.

A row says what the field is called in the search space (`name`, the Layout field), on the command
line (`cli_flag`), in a case file's `parallel` section and plan.json's `layout` (`case_key`, plus the
other keys a case file accepts, `aliases`), how its values are written (`kind`; enum knobs hold
the codes of `enum`, a costmodels type), its case-file default, its help text and its label.
The search's knob lists, the `planner plan` options, the case-file keys and defaults, the output
keys and the rows of "why this layout" are all derived from `TABLE` below; `layouts.py` converts
between a Layout and knob values with it.
"""
from __future__ import annotations

from dataclasses import dataclass

from costmodels.types import GradComm, Offload, Precision, Recompute, Sparsity

INT, BOOL, ENUM, FLOAT = "int", "bool", "enum", "float"


@dataclass(frozen=True)
class Knob:
    """One Layout field."""

    name: str                       # the Layout field and search-space key
    kind: str                       # INT, BOOL, ENUM (values are the codes of `enum`) or FLOAT
    cli_flag: str | None            # `planner plan` option pinning or restricting it (None: none)
    case_key: str                   # key in a case's `parallel` section and in plan.json's `layout`
    aliases: tuple[str, ...] = ()   # other keys a case may use for it
    default: object = None          # case-file default; None: derived (GPUs, model, other fields)
    help: str = ""                  # the CLI option's help, after "Pin or restrict: "
    doc: str = ""                   # what it is (the search space's description)
    enum: type | None = None        # costmodels enum of an ENUM knob
    searched: bool = True           # a search knob (else set by the search: even stages, density)
    core: bool = False              # enumerated with the integer core by CP-SAT (else categorical)
    explain: int = 0                # position among the knobs changed one at a time (0: not changed)
    ordered: bool = False           # ... its neighbours there are the adjacent values of its domain
    minimum: int = 1                # least whole value a user may give
    maximum: int | None = None      # greatest whole value a user may give (None: MAX_KNOB_VALUE)
    structural: bool = True         # runner-ups differing in it have another structure of layout

    @property
    def label(self) -> str:
        """The knob in a sentence ('sequence parallel')."""
        return self.name.replace("_", " ")

    def decode(self, code):
        """A search value as people write it: an enum knob's name ('bf16'), a bool, else the number."""
        if self.kind == ENUM:
            return self.enum.from_code(code).value
        if self.kind == BOOL:
            return bool(code)
        return code

    @property
    def case_keys(self) -> tuple[str, ...]:
        """Every key a case file may use for it."""
        return (self.case_key,) + self.aliases


# In Layout field order (costmodels.types.LAYOUT_FIELDS); the searched ones in the search's order.
TABLE: tuple[Knob, ...] = (
    Knob("tp", INT, "--tp", "tp", default=1, help="tensor-parallel degree(s)",
         doc="tensor-parallel degree (--tensor-model-parallel-size)", core=True, explain=1, ordered=True),
    Knob("pp", INT, "--pp", "pp", default=1, help="pipeline-parallel degree(s)",
         doc="pipeline-parallel degree (--pipeline-model-parallel-size)", core=True, explain=2, ordered=True),
    Knob("dp", INT, None, "dp", doc="data-parallel degree (world / (tp * pp * cp))", core=True,
         structural=False),
    Knob("cp", INT, "--cp", "cp", default=1, help="context/sequence-parallel degree(s)",
         doc="context / sequence-parallel degree over the sequence (DeepSpeed Ulysses or ring attention)",
         core=True, explain=3, ordered=True),
    Knob("vpp", INT, "--vpp", "vpp", default=1, help="virtual pipeline stages",
         doc="model chunks per pipeline rank (interleaved 1F1B)", core=True, explain=4, ordered=True),
    Knob("mbs", INT, "--mbs", "micro_batch", ("mbs",), default=1, help="micro batch size(s)",
         doc="micro batch per GPU (--micro-batch-size)", core=True, explain=5, ordered=True),
    Knob("gbs", INT, None, "global_batch", ("gbs",), doc="global batch in sequences (--global-batch-size)",
         core=True, structural=False),
    Knob("seq_len", INT, None, "seq_len", ("seq_length",), doc="sequence length in tokens (--seq-length)",
         core=True),
    Knob("zero", INT, "--zero", "zero_stage", ("zero",), default=1, help="ZeRO stage(s) 0-3",
         doc="ZeRO stage 0-3 (--zero-stage, zero_optimization.stage)", explain=6, ordered=True,
         minimum=0, maximum=3),
    Knob("offload_optimizer", ENUM, "--offload-optimizer", "offload_optimizer", default="none",
         help="optimizer offload: none,cpu,nvme", doc="optimizer state offload: none / cpu / nvme",
         enum=Offload, explain=11),
    Knob("offload_params", ENUM, "--offload-params", "offload_params", default="none",
         help="parameter offload: none,cpu,nvme", doc="parameter offload (ZeRO-3): none / cpu / nvme",
         enum=Offload),
    Knob("offload_activations", ENUM, "--offload-activations", "offload_activations", default="none",
         help="activation-checkpoint offload: none,cpu",
         doc="full recompute's layer checkpoints in host memory: none / cpu (DeepSpeed --checkpoint-in-cpu)",
         enum=Offload, explain=14),
    Knob("recompute", ENUM, "--recompute", "recompute", default="none", help="none,selective,full",
         doc="activation recomputation: none / selective / full", enum=Recompute, explain=7),
    Knob("recompute_layers", INT, "--recompute-layers", "recompute_layers", default=0,
         help="layers per stage recomputed (0 = all)",
         doc="with full recompute, layers per stage recomputed (0 = all)", minimum=0),
    Knob("first_stage_layers", INT, None, "first_stage_layers", default=0, searched=False,
         minimum=0, doc="uneven pipeline (Megatron-Core): layers on the first stage (0 = even)"),
    Knob("last_stage_layers", INT, None, "last_stage_layers", default=0, searched=False,
         minimum=0, doc="uneven pipeline (Megatron-Core): layers on the last stage (0 = even)"),
    Knob("cpu_offload_layers", INT, None, "cpu_offload_layers", default=0, searched=False, minimum=0,
         doc="Megatron-Core activation offload (--cpu-offloading-num-layers): layers whose saved "
             "activations wait in host memory; pp 1, no recompute (0 = off)"),
    Knob("sequence_parallel", BOOL, "--sequence-parallel", "sequence_parallel", default=False,
         help="true,false", doc="Megatron sequence parallelism (--sequence-parallel)", explain=8),
    Knob("tp_comm_overlap", BOOL, "--tp-comm-overlap", "tp_comm_overlap", default=False, help="true,false",
         doc="TP collectives pipelined with their GEMMs (Megatron-Core --tp-comm-overlap, TE userbuffers; "
             "needs sequence parallelism)", explain=13, structural=False),
    Knob("flash_attention", BOOL, "--flash-attention", "flash_attention", default=True, help="true,false",
         doc="FlashAttention kernels (--use-flash-attn-v2)", explain=12, structural=False),
    Knob("precision", ENUM, "--precision", "precision", help="fp16,bf16,fp8 (fp32 too)",
         doc="training precision: fp16 / bf16 / fp8", enum=Precision, explain=9),
    Knob("sparsity", ENUM, "--sparsity", "sparsity", default="dense", help="dense,2:4",
         doc="weight sparsity: dense / 2:4", enum=Sparsity, structural=False),
    Knob("density", FLOAT, None, "density", searched=False,
         doc="kept weights (2:4 sparsity: 0.5); follows from sparsity"),
    Knob("grad_comm", ENUM, "--grad-comm", "grad_comm", default="fp32", help="fp32,bf16,zeropp,1bit",
         doc="gradient communication: fp32 / bf16 / ZeRO++ quantised / 1-bit", enum=GradComm, explain=10,
         structural=False),
)

BY_NAME = {k.name: k for k in TABLE}
BY_CASE_KEY = {key: k for k in TABLE for key in k.case_keys}

# What the search, the CLI, case files, plan.json and the explanation use, derived from TABLE.
SEARCHED = tuple(k for k in TABLE if k.searched)
KNOBS = tuple(k.name for k in SEARCHED)
CORE_KNOBS = tuple(k.name for k in SEARCHED if k.core)
CATEGORICAL_KNOBS = tuple(k.name for k in SEARCHED if not k.core)
ENUMS = {k.name: k.enum for k in SEARCHED if k.kind == ENUM}
BOOLS = tuple(k.name for k in SEARCHED if k.kind == BOOL)
CLI_KNOBS = tuple(k for k in SEARCHED if k.cli_flag)
CASE_KEYS = frozenset(BY_CASE_KEY)
CASE_DEFAULTS = {k.case_key: k.default for k in TABLE if k.default is not None}
OUTPUT_KEYS = {k.name: k.case_key for k in TABLE}
STRUCTURAL = tuple(k.name for k in SEARCHED if k.structural)
EXPLAINED = tuple(k for k in sorted(SEARCHED, key=lambda k: k.explain) if k.explain)


def flag(name: str) -> str:
    """How messages name a knob: its CLI flag, or the flag its name would have."""
    knob = BY_NAME.get(name)
    return knob.cli_flag if knob is not None and knob.cli_flag else f"--{name.replace('_', '-')}"

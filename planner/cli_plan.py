"""`planner plan` and `planner explain`."""
from __future__ import annotations

import sys
import time

import click

KNOB_OPTIONS = [
    ("tp", "tensor-parallel degree(s)"), ("pp", "pipeline-parallel degree(s)"),
    ("cp", "context/sequence-parallel degree(s)"), ("vpp", "virtual pipeline stages"),
    ("mbs", "micro batch size(s)"), ("zero", "ZeRO stage(s) 0-3"),
    ("offload_optimizer", "optimizer offload: none,cpu,nvme"), ("offload_params", "parameter offload: none,cpu,nvme"),
    ("recompute", "none,selective,full"), ("recompute_layers", "layers per stage recomputed (0 = all)"),
    ("sequence_parallel", "true,false"), ("flash_attention", "true,false"),
    ("precision", "fp16,bf16,fp8 (fp32 too)"), ("sparsity", "dense,2:4"),
    ("grad_comm", "fp32,bf16,zeropp,1bit"),
]


def _split(value):
    return [v.strip() for v in str(value).split(",") if v.strip()]


def _ints(text, option):
    from costmodels.errors import SpecError

    try:
        values = [int(v) for v in _split(text)]
    except ValueError:
        raise SpecError(f"{option} takes whole numbers separated by commas, got {text!r}") from None
    if not values or any(v <= 0 for v in values):
        raise SpecError(f"{option} takes positive whole numbers, got {text!r}")
    return values


def _batch_tokens(text):
    from costmodels.errors import SpecError
    from costmodels.units import parse_quantity

    parts = str(text).replace("..", "-").split("-")
    if len(parts) != 2:
        raise SpecError(f"--global-batch-tokens takes LOW-HIGH (e.g. 1M-4M tokens), got {text!r}")
    def tok(p):
        p = p.strip().upper().replace("M", "e6").replace("K", "e3").replace("B", "e9")
        return parse_quantity(p, what="--global-batch-tokens")
    return tok(parts[0]), tok(parts[1])


def _input_files(*refs) -> list[str]:
    """The arguments that name files or folders (not presets): an --out must not hold them."""
    from pathlib import Path

    out = []
    for ref in refs:
        try:
            if ref and Path(ref).exists():
                out.append(ref)
        except (OSError, ValueError):
            continue
    return out


class Progress:
    """Progress on stderr: done / total, best so far, time left."""

    def __init__(self, enabled: bool, what: str):
        self.enabled, self.what, self.t0, self.last = enabled, what, time.monotonic(), 0.0

    def __call__(self, done, total, best):
        if not self.enabled:
            return
        now = time.monotonic()
        if now - self.last < 0.2 and done < total:
            return
        self.last = now
        frac = done / total if total else 1.0
        eta = (now - self.t0) / frac * (1 - frac) if frac > 0 else 0.0
        bar = "#" * int(frac * 30)
        best_s = f"  best {best * 1e6:.3f} us/token" if best else ""
        sys.stderr.write(f"\r[{bar:<30s}] {done}/{total} {self.what}{best_s}  {eta:5.0f}s left ")
        if done >= total:
            sys.stderr.write("\n")
        sys.stderr.flush()


@click.command()
@click.option("--model", required=True, help="Model preset, YAML file or Hugging Face config.json.")
@click.option("--cluster", required=True, help="GPU name from the catalog (nodes of 8) or a cluster YAML.")
@click.option("--gpus", type=int, default=None, help="Number of GPUs (default: the cluster's).")
@click.option("--gpus-per-node", type=int, default=None, help="GPUs per node (default: the GPU's system).")
@click.option("--global-batch", type=int, default=None, help="Global batch in sequences.")
@click.option("--global-batch-tokens", default=None, help="Allowed global batch in tokens, LOW-HIGH (default 1M-4M).")
@click.option("--seq-len", default=None, help="Sequence length(s) allowed, comma-separated (default: the model's).")
@click.option("--objective", default="time", show_default=True,
              help="time | time-to-train | cost | memory; two comma-separated give a Pareto front.")
@click.option("--tokens", type=float, default=0.0, help="Training token budget (time-to-train, cost).")
@click.option("--top", "top_k", type=int, default=5, show_default=True, help="Plans to report.")
@click.option("--framework", default="megatron-deepspeed", show_default=True,
              help="Rules of the target: megatron-deepspeed or megatron-lm.")
@click.option("--method", type=click.Choice(["auto", "lattice", "optuna"]), default="auto", show_default=True,
              help="Exhaustive lattice scoring, or an Optuna study (auto: Optuna when the lattice is too large).")
@click.option("--storage", default=None, help="Optuna storage URL (default: SQLite next to --out).")
@click.option("--study-name", default=None, help="Optuna study to create or resume.")
@click.option("--trials", type=int, default=3000, show_default=True, help="Optuna trials.")
@click.option("--seed", type=int, default=0, show_default=True, help="Sampler seed (plans are reproducible).")
@click.option("--out", type=click.Path(), default=None, help="Write launch.sh, ds_config.json, plan.json, report.md here.")
@click.option("--force", is_flag=True, help="Replace an existing --out directory.")
@click.option("--launcher", type=click.Choice(["deepspeed", "torchrun"]), default="deepspeed", show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.option("--quiet", "-q", is_flag=True, help="No progress output.")
@click.option("--progress/--no-progress", default=None, help="Force the progress bar on or off.")
def plan(model, cluster, gpus, gpus_per_node, global_batch, global_batch_tokens, seq_len, objective, tokens,
         top_k, framework, method, storage, study_name, trials, seed, out, force, launcher, as_json, quiet,
         progress, **knobs):
    """Choose the fastest (or cheapest) layout that fits, and optionally emit the job."""
    from . import api
    from .cli import _dump, _run
    from .output import plan_to_dict, plan_text

    show = (progress if progress is not None else sys.stderr.isatty()) and not quiet

    def work():
        from .output import check_out_dir, default_storage
        from .search import USER_CACHE
        inputs = _input_files(model, cluster)
        if out is not None:
            check_out_dir(out, force, inputs)
        choices = {k: _split(v) for k, v in knobs.items() if v is not None}
        store = storage or (default_storage(out) if out else USER_CACHE)
        reporter = Progress(show, "trials" if method == "optuna" else "blocks")
        result = api.plan(model, cluster, gpus=gpus, gpus_per_node=gpus_per_node, global_batch=global_batch,
                          global_batch_tokens=_batch_tokens(global_batch_tokens) if global_batch_tokens else None,
                          seq_lens=_ints(seq_len, "--seq-len") if seq_len else None, choices=choices,
                          objective=objective, top_k=top_k, framework=framework, total_tokens=tokens,
                          method=method, storage=store, study_name=study_name, seed=seed, trials=trials,
                          progress=reporter)
        written = None
        if out:
            from .emit.writer import write_plan
            written = write_plan(result, out, force=force, launcher=launcher, inputs=inputs)
        return result, written

    result, written = _run(work)
    if as_json:
        click.echo(_dump(plan_to_dict(result)))
    else:
        click.echo(plan_text(result))
        if written:
            click.echo(f"\nwrote {written}")


for _name, _help in KNOB_OPTIONS:
    plan = click.option(f"--{_name.replace('_', '-')}", _name, default=None, help=f"Pin or restrict: {_help}.")(plan)


@click.command()
@click.argument("plan_json", type=click.Path())
@click.option("--out", type=click.Path(), default=None, help="Write report.md and figures here (default: print).")
@click.option("--force", is_flag=True, help="Replace files in --out.")
def explain(plan_json, out, force):
    """Re-render the report of a plan.json."""
    from .cli import _run
    from .emit.plan_file import load_plan_json
    from .report import render_report

    def work():
        if out is not None:
            from .output import check_out_dir
            check_out_dir(out, force, [plan_json])
        from costmodels.errors import SpecError
        from .emit.plan_file import check_plan

        data = load_plan_json(plan_json)
        check_plan(data, plan_json)
        try:
            if out is not None:
                from .emit.writer import write_report_dir
                return write_report_dir(data, out, force=force, inputs=[plan_json])
            return render_report(data, figures={})
        except (KeyError, TypeError, AttributeError, ValueError, IndexError) as exc:
            # fields the checks above do not cover (runner-ups, breakdowns) edited by hand
            what = f"missing field {exc}" if isinstance(exc, KeyError) else exc.__class__.__name__
            raise SpecError(f"plan file '{plan_json}' is damaged: {what}") from None

    text = _run(work)
    click.echo(text if not out else f"wrote {text}")

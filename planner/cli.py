"""The `planner` command line (click): estimate, plan, explain, catalog, validate.

Every error the user can cause is a PlannerError; it becomes one line on stderr and exit code 2.
"""
from __future__ import annotations

import sys

import click

from .emit.shell import comment_text as one_line
from .cli_common import ASCII_FLOAT, CLIError, Interrupted, run_command
from .arguments import cli_token_budget
from .serialise import to_json


class OneLineErrors(click.Group):
    """Usage errors (a bad option value, a missing argument) as one `error:` line with exit code 2,
    like every other bad input, instead of click's usage block; --help is unchanged."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except click.UsageError as exc:
            raise CLIError(exc.format_message().splitlines()[0] + _hint(exc)) from None
        except (KeyboardInterrupt, click.exceptions.Abort):
            # Ctrl-C after a command's work (printing its result): click's 'Aborted!' and exit 1 said
            # nothing; its files, if any, are already whole (written atomically)
            raise Interrupted("interrupted; what was written, if anything, is whole") from None


def _hint(exc) -> str:
    cmd = exc.ctx.command_path if getattr(exc, "ctx", None) is not None else "planner"
    return f" (see {cmd} --help)"


@click.group(cls=OneLineErrors, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="llm-train-planner")
def main():
    """Plan large-language-model training: estimate, search and emit Megatron-DeepSpeed jobs."""


@main.command()
@click.argument("case", type=click.Path(dir_okay=True))
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of text.")
@click.option("--tokens", type=ASCII_FLOAT, default=None, help="Tokens to train on (time, GPU-hours, cost).")
@click.option("--calibration", type=click.Path(), default=None, help="calib.yaml from `planner calibrate`.")
def estimate(case, as_json, tokens, calibration):
    """Estimate memory and step time of the layout in CASE (a case YAML or a plan.json)."""
    from . import api
    from .text import estimate_text

    result = run_command(lambda: api.estimate(case, total_tokens=cli_token_budget(tokens), calibration=calibration))
    if as_json:
        click.echo(run_command(lambda: to_json(result.to_dict())))   # a non-finite figure is one error line
        return
    c = result.case
    title = (f"{one_line(c.model.name)} on {c.layout.world} x {one_line(c.cluster.gpu.name)} "
             f"({c.cluster.gpus_per_node} per node, framework {one_line(c.framework.name)})")
    click.echo(estimate_text(title, c.layout, result.estimate, total_tokens=result.total_tokens,
                             price=c.cluster.price_per_gpu_hour, currency=c.cluster.price_currency,
                             defaults=result.defaults,
                             hidden=result.hidden_comm, bands=result.bands))
    if result.offload_needs:
        from .breakdown import offload_text
        click.echo("\n  " + offload_text(result.offload_needs))
    if result.warnings:
        from .output import warning_lines
        click.echo("\n  warnings:")
        click.echo("\n".join(f"    {w}" for w in warning_lines(result.warnings)))


@main.command()
@click.argument("kind", type=click.Choice(["gpus", "models", "frameworks"]), required=False)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def catalog(kind, as_json):
    """List the presets: GPUs, models and frameworks."""
    from costmodels import catalog as cat
    from costmodels.params import total_params

    kinds = [kind] if kind else ["gpus", "models", "frameworks"]
    out = {}
    for k in kinds:
        singular = k[:-1]
        entries = {}
        for name in cat.names(singular):
            if singular == "gpu":
                g = cat.load_gpu(name)
                entries[name] = {"hbm_gib": g.hbm_bytes / 2**30,
                                 "bf16_tflops": g.peak_flop_per_s.get("bf16", g.peak_flop_per_s.get("fp16", 0)) / 1e12,
                                 "fp8_tflops": g.peak_flop_per_s.get("fp8", 0) / 1e12,
                                 "hbm_tb_per_s": g.hbm_bytes_per_s / 1e12}
            elif singular == "model":
                m = cat.load_model(name)
                entries[name] = {"params_billion": total_params(m) / 1e9, "layers": m.num_layers,
                                 "hidden": m.hidden, "heads": m.num_heads, "kv_heads": m.num_kv_heads,
                                 "seq_len": m.max_seq_len}
            else:
                entries[name] = {"source": cat.load_framework(name).source.split(";")[0].strip()}
        out[k] = entries
    if as_json:
        click.echo(to_json(out))
        return
    for k, entries in out.items():
        click.echo(f"{k}:")
        for name, info in entries.items():
            detail = "  ".join(f"{a}={b:.4g}" if isinstance(b, float) else f"{a}={b}" for a, b in info.items())
            click.echo(f"  {name:18s} {detail}")


@main.command()
@click.option("--data", type=click.Path(file_okay=False), default=None,
              help="Validation folder (default ../shared/validation or $PLANNER_VALIDATION_DIR).")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@click.option("--no-vtrain", is_flag=True, help="Skip the 1,440 vTrain rows.")
def validate(data, as_json, no_vtrain):
    """Compare predicted step time and memory with published measured runs."""
    from .validation import evaluate, load_records, summarize

    results = run_command(lambda: evaluate(load_records(data, include_vtrain=not no_vtrain)))
    summary = summarize(results)
    if as_json:
        click.echo(to_json(summary))
        return
    from .validation import format_table
    click.echo(format_table(results, summary))


@main.command()
@click.argument("inputs", nargs=-1, required=True, type=click.Path())
@click.option("--plan", "plan_path", type=click.Path(), default=None,
              help="plan.json the logs came from (default: next to each log or one folder up).")
@click.option("--out", type=click.Path(), default=None, help="Write the calibration here (calib.yaml).")
@click.option("--force", is_flag=True, help="Replace an existing --out file.")
@click.option("--json", "as_json", is_flag=True, help="Print calib.yaml's content as JSON.")
def calibrate(inputs, plan_path, out, force, as_json):
    """Refit compute scale, network efficiency, per-step overhead and the host's per-kernel time to
    measured runs: Megatron-DeepSpeed logs (probe/<rank>.log with their plan.json) or measured-run
    YAML files."""
    from .calibrate import calibrate as _calibrate, calibration_text

    cal = run_command(lambda: _calibrate(list(inputs), plan=plan_path, out=out, force=force))
    if as_json:
        click.echo(to_json(cal.to_dict()))
        return
    click.echo(calibration_text(cal))
    if out:
        click.echo(f"\nwrote {out}")


from .cli_plan import explain, plan  # noqa: E402  (registers the search commands)

main.add_command(plan)
main.add_command(explain)


if __name__ == "__main__":
    sys.exit(main())

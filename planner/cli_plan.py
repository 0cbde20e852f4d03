"""`planner plan` and `planner explain`."""
from __future__ import annotations

import sys
import time
from pathlib import Path

import click

from .cli_common import ASCII_FLOAT, ASCII_INT

from search_spaces.knobs import CLI_KNOBS

from .arguments import batch_token_range as _batch_tokens
from .arguments import cli_token_budget


def _split(value):
    from costmodels.errors import SpecError

    items = [v.strip() for v in str(value).split(",")]
    if any(not v for v in items):
        raise SpecError(f"{str(value)[:60]!r}: an empty item in a comma-separated list; write values like 1,2,4")
    return items


def _ints(text, option):
    from costmodels.errors import SpecError

    try:
        # ASCII digits only: int() also reads '1_024' and other scripts' digits
        values = [int(v) if v.isascii() and v.lstrip("+").isdigit() else int("x") for v in _split(text)]
    except ValueError:
        raise SpecError(f"{option} takes whole numbers separated by commas, got {text!r}") from None
    if not values or any(v <= 0 for v in values):
        raise SpecError(f"{option} takes positive whole numbers, got {text!r}")
    return values


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


def _given_study_flags(ctx) -> list[str]:
    """The Optuna-only options the user gave (--storage, --study-name, --trials), by their flags."""
    from click.core import ParameterSource
    given = {ParameterSource.COMMANDLINE, ParameterSource.ENVIRONMENT}
    return [flag for name, flag in (("storage", "--storage"), ("study_name", "--study-name"), ("trials", "--trials"))
            if ctx.get_parameter_source(name) in given]


def _notice(line: str) -> None:
    """A one-line notice of the search on stderr (a resumed study); --quiet silences it. Printable only:
    a default study name carries the model's name, which may hold a terminal escape."""
    from .emit.shell import printable
    sys.stderr.write(printable(line) + "\n")
    sys.stderr.flush()


class Progress:
    """Progress on stderr: done / total, best so far, time left. A bar redrawn in place on a terminal;
    elsewhere (a pipe, a log file) one line every LINE_EVERY_S seconds and at the end."""

    LINE_EVERY_S = 5.0

    def __init__(self, enabled: bool, what: str, lines: bool = False):
        self.enabled, self.what, self.t0, self.last = enabled, what, time.monotonic(), 0.0
        self.lines, self.printed = lines, False
        if lines:
            self.last = self.t0        # lines: nothing for a search shorter than LINE_EVERY_S

    def __call__(self, done, total, best):
        if not self.enabled:
            return
        now = time.monotonic()
        if now - self.last < (self.LINE_EVERY_S if self.lines else 0.2) and (done < total or self.lines
                                                                            and not self.printed):
            return
        self.printed = True
        self.last = now
        frac = done / total if total else 1.0
        eta = (now - self.t0) / frac * (1 - frac) if frac > 0 else 0.0
        best_s = f"  best {best * 1e6:.3f} us/token" if best else ""
        if self.lines:
            sys.stderr.write(f"progress: {done}/{total} {self.what}{best_s}, {now - self.t0:.0f} s elapsed, "
                             f"about {eta:.0f} s left\n")
            sys.stderr.flush()
            return
        bar = "#" * int(frac * 30)
        sys.stderr.write(f"\r[{bar:<30s}] {done}/{total} {self.what}{best_s}  {eta:5.0f}s left ")
        if done >= total:
            sys.stderr.write("\n")
        sys.stderr.flush()


MAX_PROBE = 1000        # as many as --top may report (planner.api)


@click.command()
@click.option("--model", required=True, help="Model preset, YAML file or Hugging Face config.json.")
@click.option("--cluster", required=True, help="GPU name from the catalog (nodes of 8) or a cluster YAML.")
@click.option("--gpus", type=ASCII_INT, default=None, help="Number of GPUs (default: the cluster's).")
@click.option("--gpus-per-node", type=ASCII_INT, default=None, help="GPUs per node (default: the GPU's system).")
@click.option("--global-batch", type=ASCII_INT, default=None, help="Global batch in sequences.")
@click.option("--global-batch-tokens", default=None, help="Global batch in tokens: LOW-HIGH or one target; K/M/G = 2^10/2^20/2^30 "
                   "(default: 1M-4M, wider on large clusters; see README).")
@click.option("--seq-len", default=None, help="Sequence length(s) allowed, comma-separated (default: the model's).")
@click.option("--objective", default="time", show_default=True,
              help="time | time-to-train | cost | memory; two comma-separated give a Pareto front.")
@click.option("--tokens", type=ASCII_FLOAT, default=None,
              help="Training token budget (time-to-train, cost; sets --train-iters in launch.sh).")
@click.option("--price-per-gpu-hour", "price", default=None,
              help="Price of one GPU-hour, with an optional currency ('2.5 USD'); overrides the cluster's price "
                   "and its currency.")
@click.option("--top", "top_k", type=ASCII_INT, default=5, show_default=True, help="Plans to report.")
@click.option("--framework", default="megatron-deepspeed", show_default=True,
              help="Rules of the target: megatron-deepspeed or megatron-lm.")
@click.option("--method", type=click.Choice(["auto", "lattice", "optuna"]), default="auto", show_default=True,
              help="Exhaustive lattice scoring, or an Optuna study (auto: Optuna when over 4 million layouts satisfy the rules).")
@click.option("--storage", default=None, help="Optuna storage URL (default: SQLite next to --out).")
@click.option("--study-name", default=None, help="Optuna study to create or resume.")
@click.option("--trials", type=ASCII_INT, default=3000, show_default=True, help="Optuna trials.")
@click.option("--seed", type=ASCII_INT, default=0, show_default=True, help="Sampler seed (plans are reproducible).")
@click.option("--out", type=click.Path(), default=None, help="Write launch.sh, ds_config.json, plan.json, report.md here.")
@click.option("--force", is_flag=True, help="Replace an existing --out directory (an earlier plan or report, or an empty one), with everything in it.")
@click.option("--probe", "probe", type=ASCII_INT, default=0,
              help="Also write probe.sh: the top K candidates for a few logged iterations each (needs --out).")
@click.option("--calibration", type=click.Path(), default=None, help="calib.yaml from `planner calibrate`.")
@click.option("--launcher", type=click.Choice(["deepspeed", "torchrun"]), default="deepspeed", show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.option("--quiet", "-q", is_flag=True, help="No progress output.")
@click.option("--progress/--no-progress", default=None, help="Force the progress bar on or off.")
def plan(model, cluster, gpus, gpus_per_node, global_batch, global_batch_tokens, seq_len, objective, tokens,
         price, top_k, framework, method, storage, study_name, trials, seed, out, force, probe, calibration, launcher, as_json, quiet,
         progress, **knobs):
    """Choose the fastest (or cheapest) layout that fits, and optionally emit the job."""
    from . import api
    from .cli_common import run_command
    from .output import plan_text
    from .serialise import in_reading_order, plan_to_dict, to_json

    # A bar on a terminal (or with --progress); progress lines every few seconds on a pipe; --quiet: none.
    tty = sys.stderr.isatty()
    show = (progress if progress is not None else True) and not quiet
    lines = show and not tty and progress is None

    study_flags = _given_study_flags(click.get_current_context())
    launcher_given = click.get_current_context().get_parameter_source("launcher") == \
        click.core.ParameterSource.COMMANDLINE

    def work():
        from .outdir import check_out_dir, default_storage
        from .study import public_storage, remove_unshared_study_file, sqlite_file
        from .settings import USER_CACHE
        from costmodels.errors import SpecError
        inputs = _input_files(model, cluster)
        if not 0 <= probe <= MAX_PROBE:
            raise SpecError(f"--probe takes a number of candidates from 0 to {MAX_PROBE:,}, got {probe}")
        if method == "lattice" and study_flags:
            raise SpecError(f"{' and '.join(study_flags)} set{'s' if len(study_flags) == 1 else ''} up an Optuna "
                            "study, and --method lattice runs none (it scores every layout); drop "
                            f"{'it' if len(study_flags) == 1 else 'them'}, or use --method optuna")
        if probe and not out:
            raise SpecError("--probe writes probe.sh into the job directory: it needs --out DIR")
        if launcher_given and not _writes_job(framework):
            raise SpecError(f"--launcher chooses how launch.sh starts the job, and --framework {framework} writes no "
                            "job (plan.json, report.md and figures only; the job files are Megatron-DeepSpeed's): drop "
                            "--launcher, or plan for --framework megatron-deepspeed")
        if out is not None:
            check_out_dir(out, force, inputs)
        choices = {k: _split(v) for k, v in knobs.items() if v is not None}
        if storage is not None and not storage.strip():
            raise SpecError("--storage is empty; give a database URL (sqlite:///studies.db), or leave it out for "
                            "the default (a file beside --out, else the user cache)")
        store = storage or (default_storage(out) if out else USER_CACHE)
        db = sqlite_file(storage) if (storage and out) else None
        if db is not None and db.resolve() == Path(out).resolve():
            raise SpecError(f"--storage names the same path as --out {out}; give the database another file name "
                            "(the default when --storage is not given: an .optuna.db file next to the folder)")
        if db is not None and Path(out).resolve() in db.resolve().parents:
            raise SpecError(f"--storage puts the Optuna study inside --out {out}, which the planner writes "
                            "whole (and --force replaces); keep the database beside it (the default when "
                            "--storage is not given: an .optuna.db file next to the folder)")
        reporter = Progress(show, "trials" if method == "optuna" else "blocks", lines=lines)
        # the default study file beside --out, made by this run: removed again if the run fails
        made_here = sqlite_file(store) if (not storage and out) else None
        if made_here is not None and made_here.exists():
            made_here = None
        done = False
        try:
            result = _plan_and_write(store, choices, inputs, reporter)
            done = True
            return result
        except SpecError as exc:
            prefix = f"--storage {public_storage(store)!r}: "
            if storage or not out or not str(exc).startswith(prefix):
                raise
            # the study file is the default one beside --out: the user gave no --storage to blame. A file
            # that was there already is in the way; otherwise the message's own fix holds (a path too long
            # for SQLite was told to 'move that file away', which did not exist)
            what, _, fix = str(exc)[len(prefix):].partition("; ")
            default = sqlite_file(store)
            if (default is not None and default.exists() and made_here is None) or not fix:
                fix = "move that file away, or give --storage"
            raise SpecError(f"the study file --out {out} keeps beside it: {what}; {fix}") from None
        finally:
            # a failure of any kind (a full disk's SpecError too): unless another run shares the file
            if not done and made_here is not None and made_here.exists():
                remove_unshared_study_file(made_here)

    def _plan_and_write(store, choices, inputs, reporter):
        result = api.plan(model, cluster, gpus=gpus, gpus_per_node=gpus_per_node, global_batch=global_batch,
                          global_batch_tokens=_batch_tokens(global_batch_tokens) if global_batch_tokens else None,
                          seq_lens=_ints(seq_len, "--seq-len") if seq_len else None, choices=choices,
                          objective=objective, top_k=max(top_k, probe) if probe > 0 else top_k, framework=framework, total_tokens=cli_token_budget(tokens),
                          method=method, storage=None if method == "lattice" else store, study_name=study_name,
                          seed=seed, trials=trials,
                          progress=reporter, price_per_gpu_hour=price, calibration=calibration,
                          notify=None if quiet else _notice)
        written = None
        if out:
            from .emit.writer import write_plan
            written = write_plan(result, out, force=force, launcher=launcher, inputs=inputs, probe=probe)
        return result, written

    result, written = run_command(work)
    if study_flags and result.method == "lattice":
        click.echo(f"note: {', '.join(study_flags)} not used: the lattice was small enough to score every "
                   "layout, so no Optuna study ran (--method optuna runs one)", err=True)
    if as_json:
        click.echo(to_json(in_reading_order(plan_to_dict(result)), sort_keys=False))
    else:
        click.echo(plan_text(result))
        if written:
            click.echo(f"\nwrote {written}")
    if written and not _writes_job(framework):
        click.echo(f"note: --framework {framework} has no job emitter: {written} holds plan.json, report.md and "
                   "figures only, no launch.sh or ds_config.json (those are Megatron-DeepSpeed's)", err=True)


def _writes_job(framework: str) -> bool:
    """Whether the framework profile names a job emitter (--out then writes launch.sh and the rest)."""
    from search_spaces.frameworks import PROFILES
    profile = PROFILES.get(framework)
    return profile is None or bool(profile.emitter)


for _knob in CLI_KNOBS:       # one pin-or-restrict option per knob of the table that has a flag
    plan = click.option(_knob.cli_flag, _knob.name, default=None, help=f"Pin or restrict: {_knob.help}.")(plan)


@click.command()
@click.argument("plan_json", type=click.Path())
@click.option("--out", type=click.Path(), default=None, help="Write report.md and figures here (default: print).")
@click.option("--force", is_flag=True, help="Replace an existing --out directory (an earlier plan or report, or an empty one), with everything in it.")
@click.option("--json", "as_json", is_flag=True, help="Print the plan as one JSON object (reading order).")
def explain(plan_json, out, force, as_json):
    """Re-render the report of a plan.json."""
    from .cli_common import run_command
    from .emit.plan_file import load_plan_json
    from .report import render_report
    from .serialise import in_reading_order, to_json

    def work():
        if out is not None:
            from .outdir import check_out_dir
            check_out_dir(out, force, [plan_json])
        from costmodels.errors import SpecError
        from .emit.plan_file import check_plan

        data = load_plan_json(plan_json)
        check_plan(data, plan_json)
        notes.extend(_drift_note(data, plan_json))
        try:
            if as_json:
                render_report(data, figures={})  # the same damage checks as the text (nothing is printed)
                return data
            if out is not None:
                from .emit.writer import write_report_dir
                return write_report_dir(data, out, force=force, inputs=[plan_json])
            return render_report(data, figures={})
        except (KeyError, TypeError, AttributeError, ValueError, IndexError) as exc:
            # fields the checks above do not cover (runner-ups, breakdowns) edited by hand
            from .emit.plan_file import _describe
            raise SpecError(f"plan file '{plan_json}' is damaged: {_describe(exc)[:200]}; re-run `planner plan "
                            "--out`") from None

    notes: list[str] = []
    text = run_command(work)
    for line in notes:
        click.echo(line, err=True)
    if as_json:
        click.echo(to_json(in_reading_order(text), sort_keys=False))
        return
    click.echo(text if not out else f"wrote {text}")


def _drift_note(data: dict, plan_json) -> list[str]:
    """explain re-renders the numbers stored in plan.json. When today's model gives another step time
    for the inputs stored beside them (the file was edited, or the catalog refitted since), say so: the
    report would otherwise pair the inputs with numbers they no longer produce."""
    from . import api
    if any(str(n).startswith(api.CALIBRATED_NOTE) for n in data.get("defaults_used") or []):
        return []          # made with a calibration this command is not given
    try:
        from .emit.plan_file import _case
        fresh = api.estimate(_case(data)).estimate.step_time_s
        stored = float(data["estimate"]["step_time_s"])
    except Exception:      # noqa: BLE001 - a plan the checks accept but the estimate cannot redo: no note
        return []
    if stored > 0 and abs(fresh / stored - 1.0) > 0.01:
        return [f"note: plan file '{plan_json}' stores a step time of {stored:.4g} s; today's model gives "
                f"{fresh:.4g} s ({(fresh / stored - 1) * 100:+.1f}%) for the inputs stored beside it (the file "
                "was edited, or the catalog refitted since): the report shows the stored numbers; "
                "`planner estimate plan.json` recomputes them"]
    return []

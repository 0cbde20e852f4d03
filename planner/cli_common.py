"""What every `planner` command shares: a PlannerError becomes one `error:` line on stderr and exit
code 2; Ctrl-C exits with 130 and says that nothing was written."""
from __future__ import annotations

import click

from costmodels.errors import PlannerError


class CLIError(click.ClickException):
    exit_code = 2

    def show(self, file=None):
        click.echo(f"error: {self.format_message()}", err=True)


class Interrupted(CLIError):
    """Ctrl-C / SIGINT: the conventional exit status 128 + 2."""
    exit_code = 130


def run_command(fn, *args, **kwargs):
    """Call `fn`; a PlannerError becomes a CLIError (its first line), Ctrl-C an Interrupted."""
    try:
        return fn(*args, **kwargs)
    except PlannerError as exc:
        raise CLIError(str(exc).splitlines()[0] if str(exc) else exc.__class__.__name__) from None
    except KeyboardInterrupt:
        raise Interrupted("interrupted; nothing was written") from None

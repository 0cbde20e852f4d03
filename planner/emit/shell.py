"""Shell text for generated scripts, whatever the target: quoting, comments, argument blocks.

Every value that reaches a generated script goes through `shell_word` (or `comment_text` inside a
comment), so the shell reads back exactly the value; `parse_args_block` is the inverse of `args_block`.
"""
from __future__ import annotations

import re
import shlex

from costmodels.errors import SpecError

# Variables the generated scripts define themselves; an argument that is exactly "$NAME" of one of these
# is left for the shell to expand (double-quoted). Every other value is quoted by shlex.quote.
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
    return printable(text)


def printable(text: str) -> str:
    """`text` with every control or other non-printable character as `?` (one line a terminal shows as is)."""
    return text if text.isprintable() else "".join(c if c.isprintable() else "?" for c in text)


def env_assignment(key: str, value) -> str:
    """KEY=VALUE for `export` in a script (value quoted) and for an environment file (checked)."""
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
    """Inverse of args_block: the argument list of launch.sh's ARGS block (what the tests check)."""
    return _parse_block(text.split("ARGS=(\n", 1)[1].split("\n)\n", 1)[0])


def parse_probe_blocks(text: str) -> list[list[str]]:
    """Every candidate's argument list of probe.sh, in order (the inverse of its ARGS blocks)."""
    return [_parse_block(part.split("\n)\n", 1)[0]) for part in text.split("ARGS=(\n")[1:]]


def _parse_block(block: str) -> list[str]:
    out = []
    for line in block.splitlines():
        out += [w for w in shlex.split(line, posix=True)]
    return [("$" + w[1:]) if w.startswith("$") else w for w in out]

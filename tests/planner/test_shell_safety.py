"""No shell injection: every value that reaches a generated script is quoted by one function
(shell.shell_word, shlex.quote) or kept out of the shell (comments lose control characters);
NUL is refused. Checked with bash itself: `bash -n`, and the words bash parses back."""
import shlex
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import planner
from costmodels.errors import SpecError
from planner.cli import main
from planner.emit.megatron_ds_job import render_scripts
from planner.emit.shell import comment_text, env_assignment, parse_args_block, shell_word

# Text bash can hold (no NUL; no lone surrogates, which cannot be encoded), biased towards the
# characters that matter to a shell.
SHELL_CHARS = st.sampled_from(list("\n\r\t '\"$`\\;&|<>(){}[]*?!#~=%^,.-_/") + ["$(touch x)", "`id`", "\x0b",
                                                                             "\x1b", "\u2028", "\x85"])
TEXT = st.lists(st.one_of(SHELL_CHARS, st.characters(blacklist_categories=("Cs",), blacklist_characters="\0")),
                max_size=30).map("".join)


def bash_words(words_src: str) -> list[str]:
    """The words bash makes of `words_src` (shell source text): set -- SRC; printf '%s\\0' "$@"."""
    r = subprocess.run(["bash", "-c", f"set -- {words_src}\nprintf '%s\\0' \"$@\""], capture_output=True)
    assert r.returncode == 0, r.stderr
    return r.stdout.decode("utf-8", "surrogateescape").split("\0")[:-1]


def bash_syntax_ok(script: bytes) -> bool:
    return subprocess.run(["bash", "-n"], input=script, capture_output=True).returncode == 0


@given(st.lists(TEXT, min_size=1, max_size=4))
@settings(max_examples=60, deadline=None)
def test_shell_word_round_trips_through_bash(values):
    assert bash_words(" ".join(shell_word(v) for v in values)) == values
    assert [shlex.split(shell_word(v)) for v in values] == [[v] for v in values]


@given(st.lists(st.one_of(TEXT, TEXT.map(lambda t: "--" + t)), min_size=1, max_size=8))
@settings(max_examples=60, deadline=None)
def test_any_argument_list_survives_the_args_block(argv):
    """Whatever pretrain_gpt.py arguments a future emitter produces, bash reads back exactly them."""
    from planner.emit.shell import args_block

    script = f"ARGS=(\n{args_block(argv)}\n)\nprintf '%s\\0' \"${{ARGS[@]}}\"\n"
    assert bash_syntax_ok(script.encode())
    r = subprocess.run(["bash", "-c", script], capture_output=True)
    assert r.stdout.decode("utf-8", "surrogateescape").split("\0")[:-1] == argv


@given(TEXT)
@settings(max_examples=40, deadline=None)
def test_exported_values_round_trip(value):
    line = "export " + env_assignment("SOME_VAR", value)
    r = subprocess.run(["bash", "-c", f"{line}\nprintf '%s' \"$SOME_VAR\""], capture_output=True)
    assert r.returncode == 0 and r.stdout.decode("utf-8", "surrogateescape") == value


@given(TEXT)
@settings(max_examples=60, deadline=None)
def test_comment_text_is_one_printable_line(value):
    c = comment_text(value)
    assert "\n" not in c and "\r" not in c and c.isprintable()
    assert len(c.splitlines() or [""]) == 1


@pytest.mark.parametrize("fn", [shell_word, comment_text, lambda v: env_assignment("X", v)])
def test_nul_is_refused_cleanly(fn):
    with pytest.raises(SpecError, match="NUL"):
        fn("a\0b")


def test_env_names_must_be_shell_names():
    with pytest.raises(SpecError):
        env_assignment("A;touch x", "1")


@pytest.fixture(scope="module")
def two_node_plan():
    """A two-node plan with tp > 1, so launch.sh, hostfile and .deepspeed_env are all emitted."""
    return planner.plan("gpt-1.7b", "H100-SXM", gpus=16, global_batch=64, choices={"tp": [2], "cp": [1]})


def non_comment_lines(script: str) -> list[str]:
    return [line for line in script.splitlines() if not line.lstrip().startswith("#")]


@given(model_name=TEXT.filter(lambda s: s.strip()), gpu_name=TEXT.filter(lambda s: s.strip()))
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_names_cannot_reach_the_shell(two_node_plan, model_name, gpu_name):
    """Names (YAML `name`, an inline GPU's name, a config.json's folder) go only into comments: the
    script parses, its commands are exactly those of a plain name, and the arguments are intact."""
    base = two_node_plan
    plain, _ = render_scripts(base)
    result = replace(base, model=replace(base.model, name=model_name),
                     cluster=replace(base.cluster, gpu=replace(base.cluster.gpu, name=gpu_name), name=gpu_name))
    files, job = render_scripts(result)
    assert set(files) == {"launch.sh", "hostfile", ".deepspeed_env"}
    script = files["launch.sh"]
    assert bash_syntax_ok(script)
    text = script.decode()
    assert non_comment_lines(text) == non_comment_lines(plain["launch.sh"].decode())
    assert parse_args_block(text) == list(job.argv)
    for line in text.splitlines()[1:4]:
        assert line.startswith("#")
    assert files["hostfile"] == plain["hostfile"] and files[".deepspeed_env"] == plain[".deepspeed_env"]


def test_launch_args_are_bash_words(two_node_plan):
    """What bash makes of the ARGS array is exactly the job's argv (the $VARS expanded)."""
    files, job = render_scripts(two_node_plan)
    text = files["launch.sh"].decode()
    block = text.split("ARGS=(\n", 1)[1].split("\n)\n", 1)[0]
    env = "DATA_PATH=/d CHECKPOINT_PATH=/c TOKENIZER_MODEL=/t VOCAB_FILE=/v MERGE_FILE=/m DS_CONFIG=/ds"
    r = subprocess.run(["bash", "-c", f"{env}; ARGS=(\n{block}\n); printf '%s\\0' \"${{ARGS[@]}}\""],
                       capture_output=True, text=True)
    expanded = {"$DATA_PATH": "/d", "$CHECKPOINT_PATH": "/c", "$TOKENIZER_MODEL": "/t", "$VOCAB_FILE": "/v",
                "$MERGE_FILE": "/m", "$DS_CONFIG": "/ds"}
    assert r.stdout.split("\0")[:-1] == [expanded.get(a, a) for a in job.argv]
    hosts = files["hostfile"].decode().splitlines()
    assert all(line.startswith("#") or shlex.split(line) == line.split() for line in hosts)
    assert files[".deepspeed_env"].decode() == "CUDA_DEVICE_MAX_CONNECTIONS=1\n"


# (a relative file: a name holding a local path is refused outright, test_fuzz_round20)
MODEL_YAML = ('name: "evil\\ntouch pwned-{tag}\\n# "\nnum_layers: 4\nhidden_size: 1024\n'
              'num_attention_heads: 16\nvocab_size: 32000\nseq_length: 2048\n')


def test_issue_reproducer_model_name_with_newline(tmp_path):
    (tmp_path / "m.yaml").write_text(MODEL_YAML.format(tag=tmp_path.name))
    out = tmp_path / "D"
    r = CliRunner().invoke(main, ["plan", "--cluster", "H100-SXM", "--gpus", "8", "--model",
                                  str(tmp_path / "m.yaml"), "--out", str(out), "--quiet"])
    assert r.exit_code == 0, r.output
    script = (out / "launch.sh").read_bytes()
    assert bash_syntax_ok(script)
    assert not any("touch" in line for line in non_comment_lines(script.decode()))
    assert script.decode().splitlines()[2].startswith("# Layout:")


def test_hf_config_folder_name_cannot_inject(tmp_path):
    folder = tmp_path / "x\n$(touch pwned)\n"
    folder.mkdir()
    (folder / "config.json").write_text('{"model_type": "llama", "hidden_size": 1024, "num_attention_heads": 16, '
                                        '"num_hidden_layers": 4, "intermediate_size": 2816, "vocab_size": 32000, '
                                        '"max_position_embeddings": 2048}')
    out = tmp_path / "D"
    r = CliRunner().invoke(main, ["plan", "--cluster", "H100-SXM", "--gpus", "8", "--model",
                                  str(folder / "config.json"), "--out", str(out), "--quiet"])
    assert r.exit_code == 0, r.output
    script = (out / "launch.sh").read_text()
    assert not any("touch" in line for line in non_comment_lines(script))


def test_nul_in_a_model_name_is_one_error_line(tmp_path):
    (tmp_path / "m.yaml").write_text('name: "a\\0b"\nnum_layers: 4\nhidden_size: 1024\nnum_attention_heads: 16\n'
                                     'vocab_size: 32000\nseq_length: 2048\n')
    r = CliRunner().invoke(main, ["plan", "--cluster", "H100-SXM", "--gpus", "8", "--model",
                                  str(tmp_path / "m.yaml"), "--out", str(tmp_path / "D")])
    assert r.exit_code == 2
    assert r.stderr.startswith("error: ") and "NUL" in r.stderr and len(r.stderr.splitlines()) == 1
    assert not (tmp_path / "D").exists()


def test_golden_scripts_still_parse():
    for script in (Path(__file__).resolve().parents[1] / "golden").glob("*/launch.sh"):
        assert bash_syntax_ok(script.read_bytes()), script

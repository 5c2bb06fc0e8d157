"""The releases' flag tables: derived from their real --help, looked up by argparse's own rules."""

from __future__ import annotations

import argparse
import contextlib
import io
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO
from tunedeck.engine_flags import Flag, FlagTable, parse_help, parse_table, release_table, render_table, table_file
from tunedeck.engines import SGLANG_ATTENTION_BACKENDS, VERSIONS, release_flags

HELP_FILES = {
    ("sglang", "0.5.23"): "sglang-0.5.23-launch_server-help.txt",
    ("vllm", "0.33.0"): "vllm-0.33.0-serve-help-all.txt",
}

SAMPLE = """usage: prog [-h] [--tp-size TP_SIZE]
                    [--cuda-graph-max-bs-decode CUDA_GRAPH_MAX_BS_DECODE]

options:
  -h, --help            show this help message and exit
  --tp-size TP_SIZE, --tensor-parallel-size TP_SIZE
                        The tensor parallelism size.
  --mode {auto,slow}    Tokenizer mode. A wrapped help line that mentions
                        --not-a-flag and {x,y} choices of nothing.
  --enable-x, --disable-x
                        A switch with its off form.
  --api-key API_KEY [API_KEY ...]
  --hf-token [HF_TOKEN]
  --prefixes [PREFIXES ...]
  --format ['auto', 'hf', 'mistral']
  --parser {a,b} or name registered in --parser-plugin
  --cuda-graph-max-bs-decode CUDA_GRAPH_MAX_BS_DECODE
  --cuda-graph-max-bs-prefill CUDA_GRAPH_MAX_BS_PREFILL
  --api-server-count API_SERVER_COUNT, -asc API_SERVER_COUNT
"""


def test_parse_help_reads_names_aliases_nargs_and_choices():
    flags = {f.names[0]: f for f in parse_help(SAMPLE)}
    assert flags["-h"] == Flag(("-h", "--help"), "", ())
    assert flags["--tp-size"] == Flag(("--tp-size", "--tensor-parallel-size"), "1", ())
    assert flags["--mode"] == Flag(("--mode",), "1", ("auto", "slow"))
    assert flags["--enable-x"] == Flag(("--enable-x", "--disable-x"), "", ())
    assert flags["--api-key"].nargs == "+"
    assert flags["--hf-token"].nargs == "?"
    assert flags["--prefixes"].nargs == "*"
    assert flags["--format"].choices == ("auto", "hf", "mistral")
    assert flags["--parser"].choices == ()  # a metavar, not argparse choices
    assert flags["--api-server-count"].names == ("--api-server-count", "-asc")
    assert "--not-a-flag" not in {n for f in flags.values() for n in f.names}  # help text is never read
    # several outputs concatenated (vLLM's --help=all, then --help): the first listing wins
    assert parse_help(SAMPLE + "\noptions:\n  --mode MODE\n") == parse_help(SAMPLE)


def test_resolve_follows_argparse():
    t = FlagTable("x", "1", parse_help(SAMPLE))
    assert t.resolve("--tp-size=4").kind == "exact"
    r = t.resolve("--tensor")
    assert (r.kind, r.name) == ("prefix", "--tensor-parallel-size")
    r = t.resolve("--cuda-graph-max-bs")
    assert r.kind == "ambiguous"
    assert r.candidates == ("--cuda-graph-max-bs-decode", "--cuda-graph-max-bs-prefill")
    r = t.resolve("--tp-sise")
    assert (r.kind, r.candidates) == ("unknown", ("--tp-size",))
    assert t.resolve("--zzzzzzzz").candidates == ()


@pytest.mark.parametrize(("engine", "release"), sorted(HELP_FILES))
def test_committed_table_is_what_the_script_derives(engine_help: Path, engine: str, release: str):
    text = (engine_help / HELP_FILES[engine, release]).read_text(encoding="utf-8")
    committed = (REPO / "tui" / "engine_flags" / f"{engine}-{release}.txt").read_text()
    assert committed == render_table(engine, release, parse_help(text), HELP_FILES[engine, release])
    t = release_table(engine, release)
    assert (t.engine, t.release) == (engine, release)
    assert t.flags == parse_help(text)  # the stored text reads back as the same flags
    # every option line of the help is one action of the table
    assert len(t.flags) == sum(1 for line in text.splitlines() if line.startswith("  -"))


def test_a_release_without_a_table_is_named():
    with pytest.raises(FileNotFoundError, match=r"tunedeck has no flag table of sglang 9\.9 \(sglang-9\.9\.txt"):
        release_table("sglang", "9.9")
    with pytest.raises(ValueError, match=r"'\.\./0\.5\.23' cannot name a flag table"):
        table_file("sglang", "../0.5.23")


def test_the_script_checks_and_refuses(engine_help: Path, tmp_path: Path):
    script = [sys.executable, str(REPO / "scripts" / "engine_flags.py")]
    help_file = engine_help / HELP_FILES["sglang", "0.5.23"]
    r = subprocess.run([*script, "sglang", "0.5.23", "--help-file", str(help_file), "--check"], capture_output=True)
    assert r.returncode == 0, r.stderr
    # the same text named as another release: no committed table to match
    r = subprocess.run([*script, "sglang", "9.9", "--help-file", str(help_file), "--check"], capture_output=True)
    assert r.returncode == 1 and b"differs" in r.stderr
    junk = tmp_path / "junk.txt"
    junk.write_text("no options here\n")
    r = subprocess.run([*script, "vllm", "0.33.0", "--help-file", str(junk)], capture_output=True, text=True)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "no argparse options found" in r.stderr
    assert not (REPO / "tui" / "engine_flags" / "sglang-9.9.txt").exists()


def test_real_releases_facts():
    sg = release_flags("sglang")
    assert sg.release == VERSIONS["sglang"]
    assert sg.get("--cpu-offload-gb") is not None
    assert sg.resolve("--cuda-graph-max-bs").candidates == ("--cuda-graph-max-bs-decode", "--cuda-graph-max-bs-prefill")
    assert sg.choices("--attention-backend") == SGLANG_ATTENTION_BACKENDS and len(SGLANG_ATTENTION_BACKENDS) == 25
    vl = release_flags("vllm")
    assert vl.get("--enable-chunked-prefill") == Flag(("--enable-chunked-prefill", "--disable-chunked-prefill"), "", ())
    assert vl.choices("--attention-backend") == ()  # enum-typed: the registry lists them
    assert vl.choices("--distributed-executor-backend") == ("external_launcher", "mp", "ray", "uni")


@pytest.mark.parametrize(
    "option",
    ["--cuda-graph-max-bs", "--cpu-offload", "--tp", "--cpu-ofload-gb", "--speculative-draft", "--mem-frac", "--dp"],
)
def test_resolution_agrees_with_argparse_on_the_real_table(option: str):
    """The pre-flight's reading of an option is the one a parser with the release's options makes."""
    t = release_flags("sglang")
    p = argparse.ArgumentParser(prog="x", add_help=False, usage="x")
    for f in t.flags:
        dest = f.names[0].lstrip("-")
        if f.takes_value:
            p.add_argument(*f.names, dest=dest)
        else:
            p.add_argument(*f.names, dest=dest, action="store_const", const="on")
    r = t.resolve(option)
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            ns, extra = p.parse_known_args([option, "1"] if r.flag is None or r.flag.takes_value else [option])
    except SystemExit:
        assert r.kind == "ambiguous", err.getvalue()
        assert (
            err.getvalue() == f"usage: x\nx: error: ambiguous option: {option} could match {', '.join(r.candidates)}\n"
        )
        return
    if option in extra:
        assert r.kind == "unknown"
    else:
        assert r.kind in ("exact", "prefix")
        assert r.flag is not None and getattr(ns, r.flag.names[0].lstrip("-")) is not None


def test_a_word_the_table_format_cannot_hold_is_refused():
    with pytest.raises(ValueError, match="'a b' cannot be stored"):
        render_table("x", "1", [Flag(("--f",), "1", ("a b",))], "help.txt")
    flags = (Flag(("--f", "-f"), "", ()), Flag(("--g",), "+", ("x", "y")))
    text = render_table("x", "1", flags, "help.txt")
    assert [line for line in text.splitlines() if not line.startswith("#")] == ["--f,-f 0", "--g + x y"]
    assert "from `help.txt`" in text.splitlines()[1]
    assert parse_table(text) == flags


def test_one_vllm_attention_backend_table(engine_help: Path):
    """The profiles' vLLM backends are the simulator's, which are the release's enum: the real
    --help lists the flag's choices (it would have to be this enum) or, enum-typed, none."""
    from tunedeck.engines import VLLM_ATTENTION_BACKENDS, VLLM_CUDA_ATTENTION_BACKENDS
    from tunedeck.profiles.schema import BUILTIN_BACKENDS
    from tunedeck.sim.engine_args import VLLM_BACKENDS

    assert list(VLLM_ATTENTION_BACKENDS) == VLLM_BACKENDS
    assert BUILTIN_BACKENDS["vllm"] == VLLM_CUDA_ATTENTION_BACKENDS
    assert set(BUILTIN_BACKENDS["vllm"]) < set(VLLM_BACKENDS)
    assert len(set(VLLM_BACKENDS)) == len(VLLM_BACKENDS)
    text = (engine_help / HELP_FILES["vllm", "0.33.0"]).read_text(encoding="utf-8")
    flag = {f.names[0]: f for f in parse_help(text)}["--attention-backend"]
    if flag.choices:
        assert sorted(c.upper() for c in flag.choices) == sorted(VLLM_BACKENDS)
    else:
        assert "--attention-backend ATTENTION_BACKEND" in text
    assert release_flags("vllm").choices("--attention-backend") == flag.choices

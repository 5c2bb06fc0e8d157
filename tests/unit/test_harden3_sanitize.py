"""Host text never controls the terminal, a huge line costs bounded memory, and an engine's
echo of a secret argument is redacted (issue "Hardening, round three", items 1-3)."""

from __future__ import annotations

import re

import pytest

from tunedeck.collectors import prom
from tunedeck.collectors.smi import parse_compute_apps, parse_query_gpu
from tunedeck.hostops.logfollow import LINE_CAP, REDACT_MARGIN, LineSplitter, cut_mark
from tunedeck.logparse import clean_line
from tunedeck.services.deploy.logs import merge_logs
from tunedeck.util.safety import REDACTED, redact_text, safe_line

#: every kind of sequence a host could send: title (OSC, BEL- and ST-ended), DCS, cursor
#: movement, clear screen, full reset, 8-bit CSI, bell, a bidi override
HOSTILE = (
    "a\x1b]0;owned\x07b\x1b]2;owned too\x1b\\c\x1bPq#0;2;0;0;0\x1b\\d"
    "\x1b[2J\x1b[H\x1b[10;20H\x1b[?1049h\x1bc\x9b2Je\x07f\u202eg\x1b[31mred\x1b[0m"
)
_SGR = re.compile(r"\x1b\[[0-9;:]*m")


def _escapes_but_sgr(text: str) -> list[str]:
    rest = _SGR.sub("", text)
    return [c for c in rest if c in "\x1b\x07\x9b\x90\x9d" or c == "\u202e"]


def test_safe_line_removes_every_sequence_but_sgr() -> None:
    shown = safe_line(HOSTILE, sgr=True)
    assert _escapes_but_sgr(shown) == []
    assert "owned" not in shown and "q#0" not in shown  # the sequences' payloads are gone too
    assert "\x1b[31mred\x1b[0m" in shown  # colour kept where asked
    assert shown.startswith("abcd") and "\\x07f" in shown and "\\u202eg" in shown  # leftovers escaped


def test_safe_line_without_colour_has_no_escape_at_all() -> None:
    shown = safe_line(HOSTILE)
    assert "\x1b" not in shown and "\x07" not in shown and "\x9b" not in shown
    assert shown.endswith("red")
    assert safe_line("plain\ttext é 日本") == "plain\ttext é 日本"  # printable text and tabs unchanged
    # an unterminated OSC loses only its introducer: the text after it stays visible
    assert safe_line("x\x1b]0;rest of line") == "x0;rest of line"


@pytest.mark.parametrize(
    "line,secret",
    [
        (
            "(APIServer pid=1) INFO 01-01 00:00:00 [utils.py:233] non-default args: {'model_tag': 'Q', "
            "'host': '127.0.0.1', 'api_key': ['token-abc123'], 'model': 'Q'}",
            "token-abc123",
        ),
        (
            "[2026-01-01 00:00:00] server_args=ServerArgs(model_path='/m', tokenizer_path='/m', "
            "api_key='sk-live-42', admin_api_key=None, max_total_tokens=4096)",
            "sk-live-42",
        ),
        ("Namespace(api_key='sk-ns-1', port=8000)", "sk-ns-1"),
        ("cmd: python -m sglang.launch_server --api-key sk-flag-2 --port 30000", "sk-flag-2"),
        ("cmd: vllm serve m --hf-token=hf_abcdef", "hf_abcdef"),
        ('env HF_TOKEN=hf_env_3 OPENAI_API_KEY="sk-env-4" vllm serve', "hf_env_3"),
        ('env HF_TOKEN=hf_env_3 OPENAI_API_KEY="sk-env-4" vllm serve', "sk-env-4"),
        ('"POST /v1/completions" Authorization: Bearer sk-bearer-5', "sk-bearer-5"),
    ],
)
def test_redact_text_hides_echoed_secret_arguments(line: str, secret: str) -> None:
    shown = redact_text(line)
    assert secret not in shown
    assert REDACTED in shown


def test_redact_text_leaves_ordinary_arguments() -> None:
    line = "server_args=ServerArgs(tokenizer_path='/m/tok', max_total_tokens=4096, api_key=None, max_tokens: 5)"
    assert redact_text(line) == line
    assert redact_text("--api-key --port 1") == "--api-key --port 1"  # no value: the next flag stays


def test_a_huge_line_is_cut_and_marked_with_the_bytes_cut() -> None:
    sp = LineSplitter()
    line = b"x" * 1_000_000
    out: list[tuple[str, int]] = []
    for i in range(0, len(line), 65536):
        out += sp.feed_sized(line[i : i + 65536])
        assert len(sp._head) <= LINE_CAP + REDACT_MARGIN  # bounded, however long the line
        assert sp.pending_bytes() == min(i + 65536, len(line))  # the resume offset stays exact
    out += sp.feed_sized(b"\nnext\n")
    (shown, size), (nxt, nsize) = out
    assert shown == "x" * LINE_CAP + cut_mark(1_000_000 - LINE_CAP)
    assert shown.endswith(" … 983616 bytes cut")
    assert size == 1_000_001 and (nxt, nsize) == ("next", 5)


KEY = "nullable-Sekrit-0123456789"
ECHOES = [f"--api-key {KEY} x", f"--api-key={KEY}, x", f"api_key={KEY} x", f"HF_TOKEN={KEY} x", f"Bearer {KEY} x"]


@pytest.mark.parametrize("echo", ECHOES)
def test_a_key_across_the_cut_is_redacted_whole_before_the_cut(echo: str) -> None:
    # the cut falls at every byte of the echo in turn; a key cut to "null" read as no key at all
    for at in range(len(echo)):
        (shown,) = LineSplitter().feed(("x" * (LINE_CAP - at) + " " + echo + "\n").encode())
        head = shown.split(" … ")[0]
        assert len(head.encode()) <= LINE_CAP
        leaked = [KEY[i : i + 4] for i in range(len(KEY) - 3) if KEY[i : i + 4] in head]
        assert not leaked, (at, head[-60:])


def test_the_cut_never_splits_a_character() -> None:
    sp = LineSplitter(cap=10)
    (shown,) = sp.feed("ééééééé\n".encode())  # 14 bytes: 5 characters fit in 10 bytes
    assert shown == "ééééé" + cut_mark(4)


def test_an_unterminated_redraw_stays_bounded_and_shows_its_last_frame() -> None:
    sp = LineSplitter()
    for i in range(20_000):
        sp.feed(f"\rLoading safetensors: {i % 100:3d}% |{'#' * (i % 50)}|".encode())
    assert len(sp._head) < 200
    assert sp.partial().startswith("Loading safetensors:  99% |")
    assert sp.pending_bytes() > 20_000 * 20  # every byte counted for the resume offset


def test_the_splitter_redacts_and_sanitizes_every_line() -> None:
    sp = LineSplitter()
    lines = sp.feed(f"{HOSTILE}\nnon-default args: {{'api_key': ['sk-abc']}}\n".encode())
    assert all("\x1b" not in ln and "\x07" not in ln for ln in lines)
    assert "sk-abc" not in lines[1] and REDACTED in lines[1]
    coloured = LineSplitter(sgr=True).feed(b"\x1b[32mINFO\x1b[0m \x1b]0;t\x07ok\n")
    assert coloured == ["\x1b[32mINFO\x1b[0m ok"]


def test_merged_deployment_log_lines_are_made_safe() -> None:
    merged = merge_logs([("n0", f"{HOSTILE}\n--api-key sk-dep-1\n"), ("n1", "x" * (LINE_CAP + 5))])
    texts = [line for _, line in merged]
    assert all("\x1b" not in t for t in texts)
    assert not any("sk-dep-1" in t for t in texts)
    assert texts[-1].endswith(cut_mark(5))


def test_parsed_lines_keep_no_sequence_and_no_secret() -> None:
    ln = clean_line("\x1b]0;owned\x07[2026-01-01 00:00:00] server_args=ServerArgs(api_key='sk-p-1')")
    for text in (ln.raw, ln.text, ln.msg):
        assert "\x1b" not in text and "owned" not in text and "sk-p-1" not in text


def test_gpu_names_process_names_and_metric_labels_are_made_safe() -> None:
    gpus = parse_query_gpu("0, GPU-1, NVIDIA H100\x1b]0;owned\x07, 40, 1000, 80000, 50, 300, 700, 1980, 2619\n")
    assert gpus and "\x1b" not in gpus[0].name and "owned" not in gpus[0].name
    procs = parse_compute_apps("123, GPU-1, 1000, python\x1b[2J\x1b]2;x\x07\n")
    assert procs and procs[0].name == "python"
    m = prom.parse('vllm:num_requests_running{model_name="m\\u\x1b]0;owned\x07"} 1\n')
    ((_, value),) = m.samples[0].labels
    assert "\x1b" not in value and "owned" not in value


def test_engine_figures_that_name_tokens_are_left_alone() -> None:
    line = (
        "[2026-01-01 00:00:00 TP0] Decode batch. #running-req: 1, #token: 1234, token usage: 0.01, "
        "gen throughput (token/s): 40.5, #queue-req: 0"
    )
    assert redact_text(line) == line


def test_the_quick_secret_test_passes_every_line_the_full_pattern_changes():
    """redact_text skips the full pattern on lines its quick test rejects: the quick test must
    pass every line the pattern would change (random lines of the pieces secrets come in)."""
    import random

    from tunedeck.util.safety import _SECRET_ARG_RE, _may_echo_secret

    pieces = [
        "--api-key", "-key", "--hf_token", "api_key", "'token'", '"secret"', "HF_TOKEN", "KEY_FILE", "token",
        "#cached-token", "Bearer", "bearer", "=", ": ", " ", "=", "'v'", "[x]", "abc", "-", "_", "#", ",", "(",
        "password", "passwd", "x-token", "Token", "KEY", "usage", "tokens/s", "'", '"',
    ]  # fmt: skip
    rng = random.Random(7)
    changed = 0
    for _ in range(20000):
        line = "".join(rng.choice(pieces) for _ in range(rng.randint(1, 8)))
        if _SECRET_ARG_RE.sub("<r>", line) != line:
            changed += 1
            assert _may_echo_secret(line.lower()), line
    assert changed > 1000  # the generator does produce secrets
    assert not _may_echo_secret("#new-token: 12, #cached-token: 0, token usage: 0.10, gen throughput (token/s): 9")

"""Compare knows a configuration tunedeck launched: a benchmark of a server tunedeck started
records that run's command, environment, engine and profile, so two benchmarks of the same
server compare identical (no "server command unknown", no engine printed as a raw dict)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from tests.integration.test_harden3_logs import _cli
from tests.integration.test_launch_sim import demo, sim_command  # noqa: F401 - the fixture
from tunedeck.bench import store
from tunedeck.hostops import launcher as L

pytestmark = pytest.mark.timeout(240)


async def test_two_benchmarks_of_a_launched_server_compare_identical(demo) -> None:
    argv, env, engine, port = sim_command("sglang-base", "--sim-load-seconds", "1")
    rec = await L.launch(demo, argv, env, engine=engine, port=port, profile="sglang-base")
    try:
        runs = []
        for _ in range(2):
            r = await asyncio.to_thread(
                _cli, "bench", "--demo", "--port", str(port), "--concurrency", "2", "--num-prompts", "6",
                "--input-len", "16", "--output-len", "8", "--warmup", "0", "--ready-timeout", "90", "--json",
            )  # fmt: skip
            assert r.returncode == 0, r.stderr.decode()[-2000:]
            runs.append(json.loads(r.stdout)["run_id"])
        meta = json.loads((store.run_dir(runs[0]) / "meta.json").read_text())
        assert meta["profile"] == "sglang-base"
        server = meta["server"]
        assert server["launch_run_id"] == rec.run_id and server["engine"] == "sglang"
        assert f"--port={port}" in server["argv"], server["argv"]
        assert Path(server["server_log"]).name == "log"

        r = await asyncio.to_thread(_cli, "compare", *runs, "--json")
        assert r.returncode == 0, r.stderr.decode()[-2000:]
        cmp = json.loads(r.stdout)
        assert cmp["config_diff"] == [], cmp["config_diff"]
        r = await asyncio.to_thread(_cli, "compare", *runs)
        text = r.stdout.decode()
        assert "unknown" not in text and "{'" not in text, text
    finally:
        await L.stop_run(demo, rec, grace=2, gpu_wait=5)

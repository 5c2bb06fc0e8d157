"""The served model's context length, read from the server's own answer, and the limit a run applies."""

from __future__ import annotations

import json

from tunedeck.bench.metrics import format_context_limit
from tunedeck.bench.runner import context_limit, served_context_length
from tunedeck.bench.workloads import WorkloadSpec, build_workload

# vLLM's /v1/models (OpenAIServingModels.show_available_models): the base model's card carries
# max_model_len; a LoRA adapter's card has none of its own and names its base model as parent
VLLM_MODELS = json.loads(
    """{"object": "list", "data": [
  {"id": "Qwen/Qwen2.5-7B-Instruct", "object": "model", "created": 1754400000, "owned_by": "vllm",
   "root": "/models/Qwen2.5-7B-Instruct", "parent": null, "max_model_len": 32768,
   "permission": [{"id": "modelperm-5c1e2a0b9d7f4e3a8b6c", "object": "model_permission", "created": 1754400000,
     "allow_create_engine": false, "allow_sampling": true, "allow_logprobs": true, "allow_search_indices": false,
     "allow_view": true, "allow_fine_tuning": false, "organization": "*", "group": null, "is_blocking": false}]},
  {"id": "sql-lora", "object": "model", "created": 1754400000, "owned_by": "vllm",
   "root": "/adapters/sql-lora", "parent": "Qwen/Qwen2.5-7B-Instruct", "max_model_len": null,
   "permission": [{"id": "modelperm-0a9b8c7d6e5f4a3b2c1d", "object": "model_permission", "created": 1754400000,
     "allow_create_engine": false, "allow_sampling": true, "allow_logprobs": true, "allow_search_indices": false,
     "allow_view": true, "allow_fine_tuning": false, "organization": "*", "group": null, "is_blocking": false}]}
]}"""
)["data"]

# SGLang's /v1/models (http_server.available_models): max_model_len is the resolved context_len
SGLANG_MODELS = json.loads(
    """{"object": "list", "data": [
  {"id": "meta-llama/Llama-3.1-8B-Instruct", "object": "model", "created": 1754400000, "owned_by": "sglang",
   "root": "meta-llama/Llama-3.1-8B-Instruct", "parent": null, "max_model_len": 131072}
]}"""
)["data"]

# SGLang's /get_model_info (/model_info) has no context length in any release: it cannot be the source
SGLANG_MODEL_INFO = {
    "model_path": "meta-llama/Llama-3.1-8B-Instruct",
    "tokenizer_path": "meta-llama/Llama-3.1-8B-Instruct",
    "is_generation": True,
    "preferred_sampling_params": None,
    "weight_version": "default",
    "has_image_understanding": False,
    "has_audio_understanding": False,
    "model_type": "llama",
    "architectures": ["LlamaForCausalLM"],
}


def test_vllm_card_gives_the_context_length_and_an_adapter_takes_its_base_models():
    assert served_context_length(VLLM_MODELS, "Qwen/Qwen2.5-7B-Instruct") == 32768
    assert served_context_length(VLLM_MODELS, "sql-lora") == 32768


def test_sglang_card_gives_the_context_length():
    assert served_context_length(SGLANG_MODELS, "meta-llama/Llama-3.1-8B-Instruct") == 131072
    assert not any("len" in k or "context" in k for k in SGLANG_MODEL_INFO)


def test_a_server_that_does_not_say_gives_none():
    assert served_context_length(VLLM_MODELS, "not-served") is None
    assert served_context_length([{"id": "fake-model", "object": "model"}], "fake-model") is None
    assert served_context_length([], "m") is None
    for bad in (None, 0, -1, "4096", True, 4096.5):
        assert served_context_length([{"id": "m", "max_model_len": bad}], "m") is None
    # a card naming itself (or a cycle) as parent does not loop
    assert served_context_length([{"id": "a", "parent": "b"}, {"id": "b", "parent": "a"}], "a") is None


def test_the_option_wins_over_the_server():
    cards = SGLANG_MODELS
    model = "meta-llama/Llama-3.1-8B-Instruct"
    assert context_limit(WorkloadSpec("random", None, {"context_limit": 200}), cards, model) == {
        "tokens": 200,
        "source": "option",
    }
    assert context_limit(WorkloadSpec("random"), cards, model) == {"tokens": 131072, "source": "server"}
    assert context_limit(WorkloadSpec("random"), [], model) == {"tokens": None, "source": None}


def test_the_servers_limit_skips_and_counts_but_is_not_a_workload_param(tmp_path):
    p = tmp_path / "c.jsonl"
    rows = [{"prompt": "a b c d", "output_len": 4}] * 3 + [{"prompt": "x" * 400, "output_len": 4}]
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    spec = WorkloadSpec("custom", str(p), {})
    wl = build_workload(spec, 3, 0, server_context=50)
    assert wl.skipped == {"over_context_limit": 1}
    assert all(s.prompt_len + s.output_len <= 50 for s in wl.specs)
    assert "context_limit" not in wl.params
    # the operator's option wins over the server's length, and is recorded as before
    opt = build_workload(WorkloadSpec("custom", str(p), {"context_limit": 500}), 3, 0, server_context=50)
    assert opt.skipped == {} and opt.params["context_limit"] == 500
    gen = build_workload(WorkloadSpec("random", None, {"input_len": 100, "output_len": 10, "range_ratio": 0.5}), 50, 4)
    cut = build_workload(
        WorkloadSpec("random", None, {"input_len": 100, "output_len": 10, "range_ratio": 0.5}),
        50,
        4,
        server_context=120,
    )
    assert gen.skipped == {} and cut.skipped["over_context_limit"] == 50 - len(cut.specs) > 0
    assert "context_limit" not in cut.params


def test_the_limit_reads_in_the_text_summary():
    assert format_context_limit({"tokens": 4096, "source": "server"}) == "4096 tokens (the server's max_model_len)"
    assert format_context_limit({"tokens": 300, "source": "option"}) == "300 tokens (--context-limit)"
    assert format_context_limit({"tokens": None, "source": None}).startswith("none (the server did not say")
    assert format_context_limit({"tokens": 5, "source": "\x1b[2J"}) == "5 tokens (source unknown)"

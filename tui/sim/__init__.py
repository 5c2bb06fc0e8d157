"""The simulator: SGLang/vLLM servers and nvidia-smi for the demo and the tests (see docs/sim-model.md)."""

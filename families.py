"""The model families, one record each: what the modules around the model need to know of a family, in one place.

Read by lora.py (`lora_targets`), chat.py (`tool_format`), servers.py (`vllm_tool_parser`) and tiny.py
(`architecture`). A new family is its record here, its modules in model.py and its config fields in
checkpoint.parse_config (and a tiny tokenizer style in tiny.py for tests). Stdlib only: chat.py reads it without torch.

Left out: the modules themselves (model.py), reading a checkpoint's config (checkpoint.py).
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Family:
    architecture: str               # config.json's "architectures" entry (the HF class)
    lora_targets: tuple             # every linear layer but lm_head, the embeddings, the depthwise conv, the experts
    tool_format: str                # pythonic (LFM2), xml (LFM3) or json (Hermes / Qwen), as chat.TOOL_FORMATS
    vllm_tool_parser: str | None    # vLLM's --tool-call-parser; None: vLLM has no implementation of the family


_LFM2 = ("q_proj", "k_proj", "v_proj", "out_proj", "in_proj", "w1", "w2", "w3")
_DENSE = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
FAMILIES = {
    "lfm2": Family("Lfm2ForCausalLM", _LFM2, "pythonic", "lfm2"),
    "lfm2_moe": Family("Lfm2MoeForCausalLM", _LFM2, "pythonic", "lfm2"),     # dense layers' w1/w2/w3 only
    "lfm3": Family("Lfm3ForCausalLM", ("q_proj", "k_proj", "v_proj", "o_proj", "g_proj", *_LFM2[3:]), "xml", None),
    "llama": Family("LlamaForCausalLM", _DENSE, "json", "llama3_json"),
    "qwen3": Family("Qwen3ForCausalLM", _DENSE, "json", "hermes"),
}

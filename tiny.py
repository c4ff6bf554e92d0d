"""Tiny random checkpoints for tests and CPU demos, written offline in each family's real on-disk format.

`write_tiny_checkpoint(dir, model_type)` writes config.json (the family's real keys, loadable by transformers too),
seeded random model.safetensors under the checkpoint's own names, and a byte-level BPE tokenizer with the family's
special tokens and chat template; `model_path` gives a --model's folder (a `TINY_MODELS` name is written on first use).
The templates follow the real ones: LFM2 llama.cpp's `llama-cpp-lfm2.jinja` and LFM2.5's (pythonic dict arguments,
`{% generation %}`), the dense family Qwen3's; LFM3 (no public template found) the LFM im_start/im_end framing with
Qwen3-Coder / Qwen3.5-style XML tool calls.

Left out: anything a real checkpoint is used for (the weights are random: they learn, they do not know).
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import torch
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers

import checkpoint
import families
from model import CausalLM

# ----------------------------------------------------------------------------- templates
_TEXT_MACRO = r"""{%- macro text(c) -%}
{%- if c is string -%}{{- c -}}
{%- elif c is iterable and c is not mapping -%}{%- for p in c -%}{{- p.text if p.type == "text" else "" -}}{%- endfor -%}
{%- endif -%}
{%- endmacro -%}
"""

LFM2_TEMPLATE = _TEXT_MACRO + r"""{{- bos_token -}}
{%- macro py(v) -%}
{%- if v is iterable -%}{{- v | tojson -}}{#- strings, lists, dicts: JSON; numbers, True/False/None: Python -#}
{%- else -%}{{- v | string -}}
{%- endif -%}
{%- endmacro -%}
{%- set ns = namespace(system="") -%}
{%- if messages[0].role == "system" -%}
{%- set ns.system = text(messages[0].content) -%}
{%- set messages = messages[1:] -%}
{%- endif -%}
{%- if tools -%}
{%- set ns.system = ns.system + ("\n" if ns.system else "") + "List of tools: <|tool_list_start|>[" -%}
{%- for tool in tools -%}
{%- set ns.system = ns.system + (tool if tool is string else tool | tojson) + ("" if loop.last else ", ") -%}
{%- endfor -%}
{%- set ns.system = ns.system + "]<|tool_list_end|>" -%}
{%- endif -%}
{%- if ns.system -%}{{- "<|im_start|>system\n" + ns.system + "<|im_end|>\n" -}}{%- endif -%}
{%- for message in messages -%}
{{- "<|im_start|>" + message.role + "\n" -}}
{%- if message.role == "assistant" -%}
{%- generation -%}
{{- text(message.content) -}}
{%- if message.tool_calls -%}
{{- "<|tool_call_start|>[" -}}
{%- for call in message.tool_calls -%}
{%- set f = call.function if call.function is defined else call -%}
{%- if f.arguments is not mapping -%}{{- raise_exception("tool call arguments of " + f.name + " must be a mapping; parse the JSON string first") -}}{%- endif -%}
{{- f.name + "(" -}}
{%- for k, v in f.arguments.items() -%}{{- k + "=" + py(v) + ("" if loop.last else ", ") -}}{%- endfor -%}
{{- ")" + ("" if loop.last else ", ") -}}
{%- endfor -%}
{{- "]<|tool_call_end|>" -}}
{%- endif -%}
{{- "<|im_end|>\n" -}}
{%- endgeneration -%}
{%- elif message.role == "tool" -%}
{{- "<|tool_response_start|>" + text(message.content) + "<|tool_response_end|><|im_end|>\n" -}}
{%- else -%}
{{- text(message.content) + "<|im_end|>\n" -}}
{%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- "<|im_start|>assistant\n" -}}{%- endif -%}
"""

_REASONING = r"""{%- set ns = namespace(last_user=-1) -%}
{%- for message in messages -%}{%- if message.role == "user" -%}{%- set ns.last_user = loop.index0 -%}{%- endif -%}{%- endfor -%}
"""

_THINK = r"""{%- if message.reasoning_content is string and message.reasoning_content and loop.index0 > ns.last_user -%}
{{- "<think>\n" + message.reasoning_content.strip("\n") + "\n</think>\n\n" -}}
{%- endif -%}
"""

_GEN_PROMPT = r"""{%- if add_generation_prompt -%}
{{- "<|im_start|>assistant\n" -}}
{%- if enable_thinking is defined and enable_thinking is false -%}{{- "<think>\n\n</think>\n\n" -}}{%- endif -%}
{%- endif -%}
"""

LFM3_TEMPLATE = _TEXT_MACRO + r"""{{- bos_token -}}
{%- set sys = namespace(text="") -%}
{%- if messages[0].role == "system" -%}
{%- set sys.text = text(messages[0].content) -%}
{%- set messages = messages[1:] -%}
{%- endif -%}
{%- if tools -%}
{%- set sys.text = sys.text + ("\n\n" if sys.text else "") + "# Tools\n\nYou have access to the following functions:\n\n<tools>" -%}
{%- for tool in tools -%}{%- set sys.text = sys.text + "\n" + (tool | tojson) -%}{%- endfor -%}
{%- set sys.text = sys.text + "\n</tools>\n\nIf you choose to call a function ONLY reply in the following format with NO suffix:\n\n<tool_call>\n<function=example_function_name>\n<parameter=example_parameter_1>\nvalue_1\n</parameter>\n</function>\n</tool_call>" -%}
{%- endif -%}
{%- if sys.text -%}{{- "<|im_start|>system\n" + sys.text + "<|im_end|>\n" -}}{%- endif -%}
""" + _REASONING + r"""{%- for message in messages -%}
{{- "<|im_start|>" + message.role + "\n" -}}
{%- if message.role == "assistant" -%}
""" + _THINK + r"""{%- set content = text(message.content) -%}
{{- content -}}
{%- for call in message.tool_calls or [] -%}
{%- set f = call.function if call.function is defined else call -%}
{%- if f.arguments is not mapping -%}{{- raise_exception("tool call arguments of " + f.name + " must be a mapping; parse the JSON string first") -}}{%- endif -%}
{{- ("\n" if content or not loop.first else "") + "<tool_call>\n<function=" + f.name + ">\n" -}}
{%- for k, v in f.arguments.items() -%}
{{- "<parameter=" + k + ">\n" + (v if v is string else v | tojson) + "\n</parameter>\n" -}}
{%- endfor -%}
{{- "</function>\n</tool_call>" -}}
{%- endfor -%}
{{- "<|im_end|>\n" -}}
{%- else -%}
{{- text(message.content) + "<|im_end|>\n" -}}
{%- endif -%}
{%- endfor -%}
""" + _GEN_PROMPT

QWEN3_TEMPLATE = _TEXT_MACRO + r"""{%- if tools -%}
{{- "<|im_start|>system\n" -}}
{%- if messages[0].role == "system" -%}{{- text(messages[0].content) + "\n\n" -}}{%- endif -%}
{{- "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>" -}}
{%- for tool in tools -%}{{- "\n" + (tool | tojson) -}}{%- endfor -%}
{{- '\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call><|im_end|>\n' -}}
{%- elif messages[0].role == "system" -%}
{{- "<|im_start|>system\n" + text(messages[0].content) + "<|im_end|>\n" -}}
{%- endif -%}
""" + _REASONING + r"""{%- for message in messages -%}
{%- if message.role == "user" or (message.role == "system" and not loop.first) -%}
{{- "<|im_start|>" + message.role + "\n" + text(message.content) + "<|im_end|>\n" -}}
{%- elif message.role == "assistant" -%}
{{- "<|im_start|>assistant\n" -}}
""" + _THINK + r"""{%- set content = text(message.content) -%}
{{- content -}}
{%- for call in message.tool_calls or [] -%}
{%- set f = call.function if call.function is defined else call -%}
{{- ("\n" if content or not loop.first else "") + '<tool_call>\n{"name": "' + f.name + '", "arguments": ' -}}
{{- (f.arguments if f.arguments is string else f.arguments | tojson) + "}\n</tool_call>" -}}
{%- endfor -%}
{{- "<|im_end|>\n" -}}
{%- elif message.role == "tool" -%}
{%- if loop.first or loop.previtem.role != "tool" -%}{{- "<|im_start|>user" -}}{%- endif -%}
{{- "\n<tool_response>\n" + text(message.content) + "\n</tool_response>" -}}
{%- if loop.last or loop.nextitem.role != "tool" -%}{{- "<|im_end|>\n" -}}{%- endif -%}
{%- endif -%}
{%- endfor -%}
""" + _GEN_PROMPT

# ----------------------------------------------------------------------------- tiny tokenizers
_LFM_SPECIAL = ["<|pad|>", "<|startoftext|>", "<|endoftext|>", "<|fim_pre|>", "<|fim_mid|>", "<|fim_suf|>",
                "<|im_start|>", "<|im_end|>", "<|tool_list_start|>", "<|tool_list_end|>", "<|tool_call_start|>",
                "<|tool_call_end|>", "<|tool_response_start|>", "<|tool_response_end|>"]
_LFM2 = dict(template=LFM2_TEMPLATE, special=_LFM_SPECIAL, added=["<think>", "</think>"],
             bos="<|startoftext|>", eos="<|im_end|>", pad="<|pad|>")
_LFM3 = dict(template=LFM3_TEMPLATE, special=_LFM_SPECIAL[:3] + _LFM_SPECIAL[6:8],
             added=["<think>", "</think>", "<tool_call>", "</tool_call>"],
             bos="<|startoftext|>", eos="<|im_end|>", pad="<|pad|>")
_DENSE = dict(template=QWEN3_TEMPLATE, special=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
              added=["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<think>", "</think>"],
              bos=None, eos="<|im_end|>", pad="<|endoftext|>")  # Qwen3: no BOS in the template
# each family's tokenizer and chat-template style (families.py holds the rest of its record)
STYLES = {"lfm2": _LFM2, "lfm2_moe": _LFM2, "lfm3": _LFM3, "llama": _DENSE, "qwen3": _DENSE}
TINY_MERGES = 400

_CORPUS = """The quick brown fox jumps over the lazy dog. You are a helpful coding assistant that reads files,
runs commands and edits code until the tests pass. Please fix the failing test in the repository.
I will read the file first, then run the tests. The function returns the wrong value when the list is empty.
def read_file(path, offset=0, limit=None):
    with open(path, encoding="utf-8") as f:
        return f.read()[offset:limit]
class Solution:
    def __init__(self, values):
        self.values = list(values)
    def total(self):
        return sum(x for x in self.values if x is not None)
for i in range(10):
    if i % 2 == 0:
        print(f"even {i}")
import os, sys, json
from pathlib import Path
{"name": "bash", "arguments": {"command": "ls -la && python -m pytest -q tests/", "timeout": 120}}
{"type": "function", "function": {"name": "edit", "description": "Replace text in a file",
 "parameters": {"type": "object", "properties": {"path": {"type": "string"}, "old": {"type": "string"},
 "new": {"type": "string"}}, "required": ["path", "old", "new"]}}}
$ git status && git diff --stat && cat README.md | head -n 20
ERROR: test_total failed: assert 3 == 4. Traceback (most recent call last): File "solution.py", line 12
The answer is correct. All 12 tests passed in 0.31s. Done: the fix handles empty input and None values.
"""


def write_tiny_tokenizer(dir, model_type: str) -> dict:
    """Write `tokenizer.json`, `tokenizer_config.json` and `chat_template.jinja` for a tiny checkpoint."""
    if model_type not in STYLES:
        raise ValueError(f"unknown model_type {model_type!r}; supported: {', '.join(sorted(STYLES))}")
    fam, dir = STYLES[model_type], Path(dir)
    dir.mkdir(parents=True, exist_ok=True)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=len(fam["special"]) + 256 + TINY_MERGES, show_progress=False,
        special_tokens=[AddedToken(t, special=True, normalized=False) for t in fam["special"]],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator([_CORPUS], trainer)
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in fam["added"]])
    tok.save(str(dir / "tokenizer.json"))
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": fam["bos"], "eos_token": fam["eos"],
              "pad_token": fam["pad"], "clean_up_tokenization_spaces": False, "model_max_length": 32768}
    (dir / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")
    (dir / "chat_template.jinja").write_text(fam["template"])
    ids = {name: tok.token_to_id(fam[name] or fam["pad"]) for name in ("bos", "eos", "pad")}
    return {"vocab_size": tok.get_vocab_size(), "bos_token_id": ids["bos"], "eos_token_id": ids["eos"],
            "pad_token_id": ids["pad"]}


# ----------------------------------------------------------------------------- tiny checkpoints

TINY = dict(hidden_size=64, num_hidden_layers=6, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
            intermediate_size=128, max_position_embeddings=4096, norm_eps=1e-5)


def tiny_config(model_type="lfm3", vocab_size=512, **over) -> dict:
    """A small config.json dict in the family's real key layout (loadable by transformers too)."""
    c = dict(TINY, model_type=model_type, vocab_size=vocab_size, tie_word_embeddings=True, initializer_range=0.02)
    if model_type == "lfm3":
        c.update(attention_bias=False, attention_dropout=0.0, conv_L_cache=7, sliding_window=8, conv_bias=False,
                 use_sandwich_norm=True, use_attention_gate=True,
                 layer_types=["conv", "conv", "full_attention", "conv", "sliding_attention", "conv"],
                 rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                                  "full_attention": {"rope_type": "proportional", "rope_theta": 1e6,
                                                     "partial_rotary_factor": 0.5}})
    elif model_type in ("lfm2", "lfm2_moe"):
        c.pop("head_dim")
        c.update(conv_L_cache=3, conv_bias=False, layer_types=["conv", "conv", "full_attention", "conv",
                                                                 "full_attention", "conv"],
                 rope_parameters={"rope_type": "default", "rope_theta": 1e6})
        if model_type == "lfm2":    # the whole key layout of a real LFM2 config.json, shaped for vLLM's CPU
            # kernels (its attention refuses head_dim 16: 2 heads of 64); vLLM reads conv_dim and block_*
            c.update(hidden_size=128, num_attention_heads=2, num_key_value_heads=1, conv_dim=128, conv_dim_out=128,
                     block_dim=128, block_ff_dim=128, block_multiple_of=256, block_ffn_dim_multiplier=1.0,
                     block_auto_adjust_ff_dim=False, block_norm_eps=1e-5, num_heads=2,
                     full_attn_idxs=[i for i, t in enumerate(c["layer_types"]) if t == "full_attention"])
        else:
            c.update(output_router_logits=False, num_dense_layers=2, num_experts=4, num_experts_per_tok=2,
                     moe_intermediate_size=32, use_expert_bias=True, norm_topk_prob=True, routed_scaling_factor=1.0)
    elif model_type in ("llama", "qwen3"):
        c.update(rms_norm_eps=1e-6, hidden_act="silu", attention_bias=False, attention_dropout=0.0,
                 rope_parameters={"rope_type": "default", "rope_theta": 1e6})
        c.pop("norm_eps")
        if model_type == "llama":
            c.update(mlp_bias=False, pretraining_tp=1)
        else:
            n = c["num_hidden_layers"]
            c.update(layer_types=["full_attention"] * n, max_window_layers=n, sliding_window=None,
                     use_sliding_window=False)
    else:
        checkpoint.parse_config({"model_type": model_type})    # raises the clear error
    # without architectures vLLM resolves the checkpoint as a pooling model
    c["architectures"] = [families.FAMILIES[model_type].architecture]
    c.update(over)
    return c


def write_tiny_checkpoint(dir, model_type="lfm3", seed=0, **config_overrides) -> Path:
    """Write a tiny random checkpoint: config.json, model.safetensors, and a tokenizer + chat template in
    the family's real format (built offline by write_tiny_tokenizer above). Used by tests and CPU demos."""
    from safetensors.torch import save_file

    d = Path(dir)
    tok = write_tiny_tokenizer(d, model_type)      # (creates d)
    cfg_d = tiny_config(model_type, vocab_size=tok["vocab_size"], bos_token_id=tok["bos_token_id"],
                        eos_token_id=tok["eos_token_id"], pad_token_id=tok["pad_token_id"], **config_overrides)
    cfg = checkpoint.parse_config(cfg_d)
    g = torch.Generator().manual_seed(seed)
    model = CausalLM(cfg)
    with torch.no_grad():
        for k, t in model.state_dict(keep_vars=True).items():
            if k == "lm_head.weight" and cfg.tie_word_embeddings:
                continue
            t.copy_(_tiny_init(k, t.shape, g, **INIT.get(model_type, {})))
    save_file({k: v.contiguous() for k, v in checkpoint.hf_state_dict(model).items()}, str(d / "model.safetensors"),
              metadata={"format": "pt"})
    (d / "config.json").write_text(json.dumps(cfg_d, indent=2) + "\n")
    return d


# A tied LFM2 (no sandwich norm) starts with its final hidden state close to its last token's embedding, whose own
# logit then grows as embed * hidden_size: at 0.3 and 128 wide it repeats that token with p > 0.99999 (no two
# rollouts differ), so its embeddings are 0.1. A final norm of that scale caps every logit as low, and an agentic
# base torn between three tool names put 30 % of its mass on noise there (its calls broke: base reward ~0.02).
# Its final norm's weights are random in sign instead (3x): no pull to the last token at init (top p ~0.3), and
# three times the contrast to learn (the same base: 0.6 % noise, reward ~0.1; docs/serving.md).
INIT = {"lfm2": dict(embed=0.1, final_norm=3.0)}
INIT_VERSION = {"lfm2": 2}      # the cached folder's name: tiny-lfm2-init2 (the one before stays for its runs)


def _tiny_init(k, shape, g, embed=0.3, final_norm=None):
    if final_norm and k == "model.embedding_norm.weight":
        return final_norm * torch.randn(shape, generator=g)
    if k.endswith("norm.weight"):      # (layernorm.weight too)
        return 1.0 + 0.1 * torch.randn(shape, generator=g)
    if k.endswith("embed_tokens.weight") or k == "lm_head.weight":    # logits can get peaked, as real ones do
        return embed * torch.randn(shape, generator=g)
    scale = 0.3 if k.endswith("conv.conv.weight") else 0.02 if k.endswith(".bias") else 0.05
    return scale * torch.randn(shape, generator=g)


# ----------------------------------------------------------------------------- --model tiny

TINY_MODELS = {"tiny": "lfm3", "tiny-lfm2": "lfm2"}       # --model name -> the tiny checkpoint's family


def model_path(model, seed=0) -> Path:
    """The checkpoint folder of --model, as train.py, eval.py and serve.py take it: a name in TINY_MODELS is
    `<cache>/tiny-<family>` (`-init<N>` after its init changed), written (seed `seed`) on first use in one rename,
    so a killed first use leaves nothing half-written; anything else goes to checkpoint.resolve_model (folders,
    GGUF, the HF cache)."""
    model = str(model)
    if model not in TINY_MODELS:
        p = Path(os.path.expanduser(model))
        if p.is_file() and p.suffix.lower() != ".gguf":
            raise checkpoint.CheckpointError(f"model {model!r}: a file, not a checkpoint folder (config.json, safetensors, "
                                    "tokenizer) or a .gguf file")
        if not p.exists() and (model.startswith(("/", ".", "~")) or model.count("/") > 1):
            raise checkpoint.CheckpointError(f"model {model!r}: no such folder")
        if "/" not in model and not p.exists() and model not in {**checkpoint.MODEL_REPOS, **checkpoint.GGUF_MODELS, **checkpoint.UNPUBLISHED}:
            raise checkpoint.CheckpointError(f"model {model!r}: not a checkpoint folder, a .gguf file, a known model ("
                                    f"{', '.join([*TINY_MODELS, *checkpoint.MODEL_REPOS, *checkpoint.GGUF_MODELS])}) or a Hugging Face "
                                    "repo id (org/name)")
        return checkpoint.resolve_model(model)
    family = TINY_MODELS[model]
    path = checkpoint.cache_root() / (f"tiny-{family}" + (f"-init{INIT_VERSION[family]}" if family in INIT_VERSION
                                                          else ""))
    if not ((path / "config.json").is_file() and (path / "model.safetensors").is_file()):
        try:
            with checkpoint.atomic_dir(path, replace=True) as tmp:
                write_tiny_checkpoint(tmp, family, seed=seed)
        except OSError as e:
            raise checkpoint.CheckpointError(f"model {model!r}: cannot write its tiny checkpoint to {path} ({e}); set "
                                    "HARNESS_RL_CACHE to a writable directory") from None
    return path


if __name__ == "__main__":   # python tiny.py [model_type] [out_dir]: write one, load it back, print its size
    import sys
    import tempfile

    mt = sys.argv[1] if len(sys.argv) > 1 else "lfm3"
    out = Path(sys.argv[2] if len(sys.argv) > 2 else tempfile.mkdtemp(prefix=f"tiny-{mt}-"))
    m = checkpoint.load_model(write_tiny_checkpoint(out, mt), device="cpu")
    print(f"{out}: a tiny {mt} checkpoint, {sum(p.numel() for p in m.parameters())} parameters")

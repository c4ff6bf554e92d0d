#!/usr/bin/env bash
# The GPU checks, as bounded commands (an H200 or any CUDA machine with torch + transformers + peft; vLLM >= 0.33
# for the serving anchor):
#   bench/gpu.sh [train]   model/LoRA parity tests on CUDA (fp32; the fused attention and grouped-GEMM parity among
#                          them), a 65 536-token branched LoRA training step at LFM3-1.7B
#                          shape (bf16; per-segment SDPA vs flex_attention side by side), LoRA fwd+bwd vs PEFT + transformers, the chunked log-prob's memory at scale,
#                          the memory plan's training peak vs max_memory_allocated (bench/plan.py)
#   bench/gpu.sh serve     serving: the embedded engine (LFM3-1.7B shape) vs vLLM (LFM2-1.2B shape), 48 sessions,
#                          2-8k-token prompts, 100-1000-token completions, 3 adapters x 5 versions (< 9 minutes);
#                          decoding tokens/s, ours vs transformers' generate vs the HBM roofline (48 rows, 2k prompts)
#   bench/gpu.sh parallel  a 65 536-token step on 2 GPUs under torchrun: one process vs DDP vs FSDP2 (needs 2 GPUs)
#   bench/gpu.sh all       all of them
set -uo pipefail
export PYTHONUNBUFFERED=1
what=${1:-train}
nvidia-smi -L || true
python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"
if [ "$what" = train ] || [ "$what" = all ]; then
  HARNESS_RL_TEST_DEVICE=cuda timeout 150 python3 -m pytest tests/test_model.py tests/test_lora.py -q -p no:cacheprovider \
    2>&1 | tail -4
  timeout 150 python3 bench/gpu.py --steps 3
  timeout 200 python3 bench/lora.py --preset lfm3-1.7b --device cuda --dtype bf16 --seq 16384 --steps 3 --rounds 1 \
    2>&1 | grep -v -e 'Writing model' -e 'Loading weights' -e Warning -e warn
  timeout 60 python3 bench/grpo.py --only c --device cuda --tokens 16384 --hidden 2048 --chunk 2048
  timeout 120 python3 bench/plan.py --device cuda --rows tiny:32768:off,LFM3-1.7B:16384:on,LFM3-1.7B:8192:off
fi
if [ "$what" = parallel ] || [ "$what" = all ]; then
  if [ "$(nvidia-smi -L 2>/dev/null | wc -l)" -ge 2 ]; then
    timeout -k 30 300 torchrun --standalone --nproc-per-node 2 bench/gpu.py --parallel --steps 3
  else
    echo "parallel: needs 2 GPUs (this machine: $(nvidia-smi -L 2>/dev/null | wc -l)); skipped"
  fi
fi
if [ "$what" = serve ] || [ "$what" = all ]; then
  # checkpoints ~1 min, ours ~1.5 min, vLLM ~3.5 min (start + compile + window), ours on vLLM's LFM2 last
  timeout -k 30 540 python3 bench/serve.py --device cuda --server all --seconds 60 --json "${OUT:-/tmp}/serve.json"
  timeout 150 python3 bench/serve.py --device cuda --generate     # decoding vs transformers' generate vs the roofline
fi

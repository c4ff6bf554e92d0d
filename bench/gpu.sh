#!/usr/bin/env bash
# The GPU checks, as one bounded script (an H200 or any CUDA machine with torch + transformers + peft):
# model/LoRA parity tests on CUDA (fp32), a 65 536-token LoRA training step at LFM3-1.7B shape (bf16),
# LoRA fwd+bwd vs PEFT + transformers, and the chunked log-prob's memory at scale.
set -uo pipefail
export PYTHONUNBUFFERED=1
nvidia-smi -L || true
python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"
HARNESS_RL_TEST_DEVICE=cuda timeout 150 python3 -m pytest tests/test_model.py tests/test_lora.py -q -p no:cacheprovider \
  2>&1 | tail -4
timeout 150 python3 bench/gpu.py --steps 3
timeout 200 python3 bench/lora.py --preset lfm3-1.7b --device cuda --dtype bf16 --seq 16384 --steps 3 --rounds 1 \
  2>&1 | grep -v -e 'Writing model' -e 'Loading weights' -e Warning -e warn
timeout 60 python3 bench/grpo.py --only c --device cuda --tokens 16384 --hidden 2048 --chunk 2048

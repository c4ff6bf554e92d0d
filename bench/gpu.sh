#!/usr/bin/env bash
# The GPU checks for model.py, as one bounded script (an H200 or any CUDA machine with torch + transformers):
# the parity/packing/cache tests on CUDA in fp32, then ours vs transformers at LFM3-1.7B shape in bf16.
set -uo pipefail
export PYTHONUNBUFFERED=1
nvidia-smi -L || true
python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"
HARNESS_RL_TEST_DEVICE=cuda timeout 300 python3 -m pytest tests/test_model.py -q -p no:cacheprovider 2>&1 | tail -15
timeout 200 python3 bench/model.py --preset lfm3-1.7b --device cuda --dtype bf16 --seq 16384 --steps 3 --packed 8 \
  2>&1 | grep -v 'Writing model'
timeout 200 python3 bench/model.py --preset lfm3-1.7b --device cuda --dtype bf16 --seq 32768 --steps 2 --packed 16 \
  --grad-ckpt 2>&1 | grep -v 'Writing model'

#!/usr/bin/env bash
# The GPU checks (an H200 or any CUDA machine with torch + transformers + peft; no network, no vLLM):
#   bench/gpu.sh           the bounded check (8 minutes; BUDGET=seconds to change it), each part given at most what
#                          is left: a 65 536-token branched GRPO step at LFM3-1.7B shape (checkpointing off/on);
#                          model/LoRA parity on CUDA (fp32: grouped GEMM, recomputation in autograd's thread, ...);
#                          decoding tokens/s, ours vs transformers' generate vs the HBM roofline (48 rows, 2k prompts;
#                          LFM3-1.7B shape, and LFM2-1.2B: transformers has it); the memory plan vs
#                          max_memory_allocated; the embedded server under 48 pi-sized sessions growing over turns
#                          (3 adapters x 5 versions); train.py --model tiny on the GPU; last, flex_attention's step
#   bench/gpu.sh lora      LoRA fwd+bwd vs PEFT + transformers, and the chunked log-prob's memory at scale
#   bench/gpu.sh vllm      serving: ours (LFM3-1.7B shape) vs vLLM (LFM2-1.2B shape) (vLLM >= 0.33; < 9 minutes)
#   bench/gpu.sh parallel  a 65 536-token step on 2 GPUs under torchrun: one process vs DDP vs FSDP2 (needs 2 GPUs)
# Each part's whole output is also written to $OUT/<part>.txt (OUT: default /tmp/gpu-bench).
set -uo pipefail
export PYTHONUNBUFFERED=1
what=${1:-check}
out=${OUT:-/tmp/gpu-bench}
mkdir -p "$out"
deadline=$((SECONDS + ${BUDGET:-470}))
part() {   # part NAME MAX_SECONDS CMD...: at most MAX or what is left of the budget; its output tee'd to $out/NAME.txt
  local name=$1 max=$2 t0=$SECONDS
  shift 2
  local left=$((deadline - SECONDS))
  [ "$left" -lt "$max" ] && max=$left
  if [ "$max" -lt 20 ]; then echo "== $name: skipped, the budget is spent"; return; fi
  echo "== $name (at most ${max} s)"
  timeout -k 10 "$max" "$@" > >(tee "$out/$name.txt" | grep -v -e 'Writing model' -e 'Loading weights' -e '^\s*$') 2>&1
  echo "== $name: exit ${?}, $((SECONDS - t0)) s"
}
# what a bare machine may lack (pytest, jinja2): runs/gpu-deps if it was carried (pip install --target runs/gpu-deps)
python3 -c "import pytest, jinja2" 2>/dev/null || export PYTHONPATH="$PWD/runs/gpu-deps${PYTHONPATH:+:$PYTHONPATH}"
nvidia-smi -L || true
python3 -c "import sys, torch, transformers; print('python', sys.version.split()[0], 'torch', torch.__version__, \
'transformers', transformers.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name())"
if [ "$what" = check ]; then
  part train-step 100 python3 bench/gpu.py --steps 2
  part tests 70 env HARNESS_RL_TEST_DEVICE=cuda python3 -m pytest tests/test_model.py tests/test_lora.py -q \
    -p no:cacheprovider -W ignore -k "not fused"
  part generate 70 python3 bench/serve.py --device cuda --generate
  part generate-lfm2 70 python3 bench/serve.py --device cuda --generate --shape lfm2-1.2b
  part plan 60 python3 bench/plan.py --device cuda --rows LFM3-1.7B:16384:on,LFM3-1.7B:8192:off
  part serve 110 python3 bench/serve.py --device cuda --server ours --seconds 30 --json "$out/serve.json"
  part train-tiny 120 python3 train.py --model tiny --steps 3 --sandbox dir --runs "$out/runs" --run tiny
  # flex_attention (opt-in: model.fused) compiles for minutes: last, with what is left
  part flex 300 python3 bench/gpu.py --steps 2 --attention flex
fi
if [ "$what" = lora ]; then
  part lora 200 python3 bench/lora.py --preset lfm3-1.7b --device cuda --dtype bf16 --seq 16384 --steps 3 --rounds 1
  part logprob 60 python3 bench/grpo.py --only c --device cuda --tokens 16384 --hidden 2048 --chunk 2048
fi
if [ "$what" = parallel ]; then
  if [ "$(nvidia-smi -L 2>/dev/null | wc -l)" -ge 2 ]; then
    part parallel 300 torchrun --standalone --nproc-per-node 2 bench/gpu.py --parallel --steps 3
  else
    echo "parallel: needs 2 GPUs (this machine: $(nvidia-smi -L 2>/dev/null | wc -l)); skipped"
  fi
fi
if [ "$what" = vllm ]; then
  # checkpoints ~1 min, ours ~1.5 min, vLLM ~3.5 min (start + compile + window), ours on vLLM's LFM2 last
  part vllm 540 python3 bench/serve.py --device cuda --server all --seconds 60 --json "$out/serve.json"
fi

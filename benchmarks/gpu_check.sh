#!/usr/bin/env bash
# The CUDA check, one call on a GPU machine (under ten minutes on an H200): install the four packages and both
# example plugins into the machine's own PyTorch (no downloads), then
#   1. gpt-train verify --device cuda --compile, for the fast and the reference set, and the triton set compiled
#      for this GPU (verify --kernels triton) with its tests;
#   2. the accelerator tests (every task and command on CUDA) and gpt-core's compile tests on CUDA;
#   3. the default sort run on CUDA, eager and --compile: the compiled run must reach the eager run's held-out
#      exact match (at least 0.9995);
#   4. the default modadd run (the grokking task) on CUDA;
#   5. the KV-cache benchmark (no cache, the cached forward, the static step replayed as a CUDA graph): the 6-layer
#      model at batch 1, and GPT-2 124M's shape over its 1,024-token block at batch 1 and 8, its tables written to
#      $OUT/kv_cache.md (DEVICE=cpu: --quick);
#   6. with NANOGPT set to a clone of karpathy/nanoGPT (its model.py only), benchmarks/gpu_step.py's table;
#   7. with SHAKESPEARE set to tinyshakespeare.txt too (NANOGPT's data/shakespeare_char prepared from it), nanoGPT's
#      GPU recipe against ours (experiments/exp_nanogpt.py --recipe gpu: 5,000 steps each, wall time and held-out
#      loss on the same characters; several minutes, so last).
# Writes the log and the runs' final.json files to $OUT; exits non-zero if any step failed. DEVICE and PYTHON
# rehearse it elsewhere (DEVICE=cpu: the same steps on the CPU, the CUDA-only tests skipped). WHEELS names a folder
# of the six packages' wheels built beforehand (the machine has no network, and its setuptools may predate 77):
#
#   pip wheel -q --no-deps -w dist/wheels packages/gpt-* examples/gpt-*
#   OUT=/tmp/gpu-check WHEELS=dist/wheels bash benchmarks/gpu_check.sh
set -uo pipefail
OUT=${OUT:-/tmp/gpu-check}
DEVICE=${DEVICE:-cuda}
PYTHON=${PYTHON:-python3}
RUNS=/tmp/gpu-runs
mkdir -p "$OUT" "$RUNS"
export PYTHONUNBUFFERED=1
TIMEFORMAT='  -> %R s wall'
failed=()
step() {  # step NAME COMMAND...: run it, timed, and remember a failure
  echo "== $1"
  local name=$1
  shift
  time "$@" || failed+=("$name")
}
recipe() {  # nanoGPT's GPU recipe against ours, its table to $OUT (the pipe's status is the experiment's)
  local quick=$([ "$DEVICE" = cpu ] && echo --quick)
  $PYTHON experiments/exp_nanogpt.py --recipe gpu --device $DEVICE $quick --nanogpt "$NANOGPT" \
    --data "$SHAKESPEARE" --out $RUNS/recipe | tee "$OUT/recipe.md"
}
kv_cache() {  # kv_cache SECONDS ARGS...: benchmarks/kv_cache.py on $DEVICE for at most SECONDS, its table to $OUT
  local limit=$1 quick=$([ "$DEVICE" = cpu ] && echo --quick)
  shift
  timeout "$limit" $PYTHON benchmarks/kv_cache.py --device $DEVICE $quick "$@" | tee -a "$OUT/kv_cache.md"
}
{
  if [ -n "${WHEELS:-}" ]; then  # built where setuptools >= 77 can be fetched; the GPU image's may be older
    $PYTHON -m pip install -q --no-deps "$WHEELS"/*.whl 2>&1 | grep -v WARNING
  else
    $PYTHON -m pip install -q --no-deps --no-build-isolation ./packages/gpt-core ./packages/gpt-tasks \
      ./packages/gpt-viz ./packages/gpt-train ./examples/gpt-task-reverse ./examples/gpt-kernel-flash 2>&1 | grep -v WARNING
  fi
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  $PYTHON -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, torch.cuda.get_device_name())"
  step "verify fast" $PYTHON -m gpt_train verify --device $DEVICE --compile --seed 0
  step "verify reference" $PYTHON -m gpt_train verify --device $DEVICE --compile --kernels reference --seed 0
  step "verify triton" $PYTHON -m gpt_train verify --device $DEVICE --kernels triton --seed 0
  step "triton tests" $PYTHON -m pytest -q -p no:cacheprovider packages/gpt-core/tests/test_triton_set.py \
    packages/gpt-core/tests/test_triton_attention.py packages/gpt-core/tests/test_triton_kernels.py
  step "accelerator tests" $PYTHON -m pytest -q -p no:cacheprovider packages/gpt-train/tests/test_accelerators.py \
    packages/gpt-core/tests/test_compile.py packages/gpt-core/tests/test_kv_cache_and_generate.py \
    packages/gpt-core/tests/test_static_decoding.py -k "cuda or accelerator"
  for mode in eager compiled; do
    flag=$([ $mode = compiled ] && echo --compile)
    step "sort on $DEVICE ($mode)" $PYTHON -m gpt_train run --task sort --device $DEVICE $flag --force --out $RUNS/sort-$mode
    cp $RUNS/sort-$mode/final.json "$OUT/sort-cuda-$mode-final.json"
  done
  step "compiled sort reaches the eager run" $PYTHON - "$OUT" <<'EOF'
import json, sys
eager, compiled = (json.load(open(f"{sys.argv[1]}/sort-cuda-{mode}-final.json")) for mode in ("eager", "compiled"))
e, c = eager["heldout_exact_match"], compiled["heldout_exact_match"]
print(f"held-out exact match: eager {e:.6f}, compiled {c:.6f}")
sys.exit(0 if c >= 0.9995 else 1)
EOF
  step "modadd on $DEVICE" $PYTHON -m gpt_train run --task modadd --device $DEVICE --quiet --force --out $RUNS/modadd
  cp $RUNS/modadd/final.json "$OUT/modadd-cuda-final.json"
  cp $RUNS/modadd/grokking.png "$OUT/modadd-cuda-grokking.png" 2>/dev/null
  step "KV cache on $DEVICE (6-layer)" kv_cache 120 --models 6l --batches 1 --rounds 3
  step "KV cache on $DEVICE (GPT-2 124M)" kv_cache 300 --models gpt2 --batches 1 8 --rounds 2 --min-rounds 1 --budget 45
  if [ -n "${NANOGPT:-}" ]; then
    step "gpu_step against nanoGPT" $PYTHON benchmarks/gpu_step.py --nanogpt "$NANOGPT" --device $DEVICE \
      $([ "$DEVICE" = cpu ] && echo --quick)
  fi
  if [ -n "${NANOGPT:-}" ] && [ -n "${SHAKESPEARE:-}" ]; then
    step "shakespeare_char recipe against nanoGPT" recipe
  fi
  if [ ${#failed[@]} -eq 0 ]; then echo "gpu_check: every step passed"; else echo "gpu_check: FAILED: ${failed[*]}"; fi
} 2>&1 | tee "$OUT/gpu_check.log"
grep -q "every step passed" "$OUT/gpu_check.log"

#!/usr/bin/env bash
# The CUDA check behind the README's GPU figures: install the four packages into the machine's own PyTorch
# (no downloads), run the accelerator tests, the default sort run on CUDA (eager and --compile), the KV-cache
# benchmark on the GPU and the grokking task on CUDA. Writes a log and the runs' final.json files to $OUT.
set -uo pipefail
OUT=${OUT:-/tmp/gpu-check}
RUNS=/tmp/gpu-runs
mkdir -p "$OUT" "$RUNS"
export PYTHONUNBUFFERED=1
TIMEFORMAT='  -> %R s wall'
{
  python3 -m pip install -q --no-deps --no-build-isolation \
    ./packages/gpt-core ./packages/gpt-tasks ./packages/gpt-viz ./packages/gpt-train 2>&1 | grep -v WARNING
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  python3 -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name())"
  python3 -m gpt_train verify --seed 0
  python3 -m pytest -q -p no:cacheprovider packages/gpt-train/tests/test_accelerators.py \
    packages/gpt-core/tests/test_kv_cache_and_generate.py -k "cuda or accelerator"
  for mode in eager compiled; do
    flag=$([ $mode = compiled ] && echo --compile)
    echo "sort on cuda ($mode):"
    time python3 -m gpt_train run --task sort --device cuda $flag --quiet --out $RUNS/sort-$mode
    cp $RUNS/sort-$mode/final.json "$OUT/sort-cuda-$mode-final.json"
  done
  python3 benchmarks/kv_cache.py --device cuda
  echo "modadd (grokking defaults) on cuda:"
  time python3 -m gpt_train run --task modadd --device cuda --quiet --out $RUNS/modadd
  cp $RUNS/modadd/final.json "$OUT/modadd-cuda-final.json"
  cp $RUNS/modadd/grokking.png "$OUT/modadd-cuda-grokking.png" 2>/dev/null
} 2>&1 | tee "$OUT/gpu_check.log"

#!/usr/bin/env bash
# The CUDA check, on a GPU machine with no network: the four packages and both example plugins, installed from the
# wheels benchmarks/gpu_pack.sh packed (into /tmp/site, on PYTHONPATH: the machine's own PyTorch and Triton stay
# as they are), then these steps, the most wanted first, each stopped at its own limit and at the call's BUDGET:
#    1. gpt-train verify --device cuda --kernels triton: the triton set compiled for this GPU, against PyTorch;
#    2. the default sort run on CUDA (the triton set, the default from compute capability 8.0): held-out exact
#       match at least 0.9995;
#    3. the KV-cache benchmark for the 6-layer model at batch 1 (no cache, the cached forward, the static step
#       replayed as a CUDA graph), its table to $OUT/kv_cache.md;
#    4. with the pack's nanoGPT, benchmarks/gpu_step.py's table (ours against nanoGPT's model.py), 6-layer shape;
#    5. with this machine's torch, a compiled training step is one graph (a graph break under its compiler makes
#       every compiled row eager), for the fast set and, traced for sm_90, the triton set;
#    6. the same sort run with --compile, which must reach 0.9995 too;
#    7. gpt-train verify --compile for the fast and the reference set;
#    8. the accelerator tests (every task and command on CUDA), gpt-core's compile tests and the triton set's tests;
#    9. the default modadd run (the grokking task);
#   10. gpu_step.py at GPT-2 124M's shape, and the KV-cache benchmark there over its 1,024-token block, batch 1
#       and 8;
#   11. with the pack's nanoGPT and text, nanoGPT's GPU recipe against ours (experiments/exp_nanogpt.py --recipe
#       gpu: 5,000 steps each, wall time and held-out loss on the same characters).
# Each step's verdict (passed, failed, timed out, not packed) is appended to $OUT/steps.tsv as it ends, and the log
# to $OUT/gpu_check.log; a step the BUDGET leaves no time for is skipped and named, so a second call can run it:
# ONLY, a regular expression, picks steps by name. Exits 1 if a step failed or was skipped, or none ran, and 3 if it
# cannot start: no wheels in the pack, a pack built from other sources than this tree's (its manifest,
# $PACK/sources.sha256, checked against the files before anything is installed), or packages that do not import.
#
#   bash benchmarks/gpu_pack.sh NANOGPT_CLONE tinyshakespeare.txt   # here, with the network
#   bash benchmarks/gpu_check.sh                                    # there; OUT (default /tmp/gpu-check) keeps it all
#   ONLY="modadd|GPT-2|recipe" bash benchmarks/gpu_check.sh         # a second call: the rest
#
# DEVICE=cpu rehearses it on a CPU (the same steps, small: --quick, 200-step runs whose exact match is printed, not
# required, Triton in its interpreter, CUDA-only tests skipped); PYTHON names the interpreter; BUDGET (seconds,
# default 570) is the call's own limit less the time to send $OUT back.
set -uo pipefail
OUT=${OUT:-/tmp/gpu-check}
DEVICE=${DEVICE:-cuda}
PYTHON=${PYTHON:-python3}
PACK=${GPU_PACK:-.gpu}
BUDGET=${BUDGET:-570}
ONLY=${ONLY:-.}
RUNS=/tmp/gpu-runs
mkdir -p "$OUT" "$RUNS"
export PYTHONUNBUFFERED=1 TQDM_DISABLE=1  # no progress bars: the log is what comes back
TIMEFORMAT='  -> %R s wall'
QUICK=$([ "$DEVICE" = cpu ] && echo --quick)
SHORT=()  # a rehearsal's runs are short, and their exact match is printed, not required
[ "$DEVICE" = cpu ] && SHORT=(--steps 200)
failed=() skipped=() ran=0

step() {  # step NAME LIMIT COMMAND...: run it for at most LIMIT seconds (less if the budget is short), noted in steps.tsv
  local name=$1 limit=$2 left=$((BUDGET - SECONDS)) verdict=passed
  shift 2
  [[ $name =~ $ONLY ]] || return 0
  if [ $left -lt 40 ]; then
    echo "== $name: skipped, ${left} s of the budget left"
    skipped+=("$name")
    printf '%s\tskipped\t0\n' "$name" >> "$OUT/steps.tsv"
    return 0
  fi
  [ $limit -gt $((left - 15)) ] && limit=$((left - 15))
  echo "== $name (at most $limit s)"
  local start=$SECONDS
  ran=$((ran + 1))
  if declare -F "$1" > /dev/null; then  # a function of this script: it applies LIMIT itself
    time LIMIT=$limit "$@" || verdict=failed
  else
    time LIMIT=$limit limited "$@" || verdict=failed
  fi
  if [ $verdict = failed ] && [ $((SECONDS - start)) -ge $((limit - 1)) ]; then verdict="timed out"; fi  # not wrong
  [ "$verdict" = passed ] || failed+=("$name ($verdict)")
  printf '%s\t%s\t%d\n' "$name" "$verdict" $((SECONDS - start)) >> "$OUT/steps.tsv"
}
unpacked() {  # unpacked NAME WHAT: a step left out because the pack has no WHAT
  [[ $1 =~ $ONLY ]] || return 0
  echo "== $1: left out, the pack has no $2"
  printf '%s\tnot packed\t0\n' "$1" >> "$OUT/steps.tsv"
}
triton_set() {  # triton_set COMMAND...: on a CPU, in Triton's interpreter
  if [ "$DEVICE" = cpu ]; then TRITON_INTERPRET=1 "$@"; else "$@"; fi
}
limited() { timeout --signal=INT --kill-after=10 "$LIMIT" "$@"; }  # limited COMMAND...: stopped after LIMIT seconds
gpt_train() { limited $PYTHON -m gpt_train "$@"; }
sort_run() {  # sort_run MODE [FLAGS]: the default sort run, its final.json kept in $OUT
  local mode=$1
  shift
  gpt_train run --task sort --device $DEVICE "${SHORT[@]}" "$@" --force --out $RUNS/sort-$mode &&
    cp $RUNS/sort-$mode/final.json "$OUT/sort-$DEVICE-$mode-final.json"
}
exact_match_at_least() {  # exact_match_at_least MODE FLOOR: the run's held-out exact match reaches FLOOR
  $PYTHON -c "import json, sys; m = json.load(open(sys.argv[1]))['heldout_exact_match']; print(f'held-out exact \
match {m:.6f}, at least {sys.argv[2]} wanted'); sys.exit(0 if m >= float(sys.argv[2]) or sys.argv[3] else 1)" \
    "$OUT/sort-$DEVICE-$1-final.json" "$2" "${SHORT[*]}"
}
sort_eager() { sort_run eager && exact_match_at_least eager 0.9995; }
sort_compiled() {  # eager's floor: its last bits differ from eager's, so its path and its own 0.999x differ too
  sort_run compiled --compile && exact_match_at_least compiled 0.9995
}
modadd() {
  gpt_train run --task modadd --device $DEVICE "${SHORT[@]}" --quiet --force --out $RUNS/modadd &&
    cp $RUNS/modadd/final.json "$OUT/modadd-$DEVICE-final.json" &&
    { cp $RUNS/modadd/grokking.png "$OUT/modadd-$DEVICE-grokking.png" 2>/dev/null || true; }
}
kv_cache() {  # kv_cache ARGS...: benchmarks/kv_cache.py on $DEVICE, its table appended to $OUT/kv_cache.md
  limited $PYTHON benchmarks/kv_cache.py --device $DEVICE $QUICK "$@" |
    tee -a "$OUT/kv_cache.md"
}
gpu_step() {  # gpu_step SHAPE: benchmarks/gpu_step.py at that shape, its table appended to $OUT/gpu_step.md
  local shape=$([ "$DEVICE" = cpu ] && echo --quick || echo --shapes "$1")
  limited $PYTHON benchmarks/gpu_step.py --nanogpt "$PACK/nanoGPT" \
    --device $DEVICE $shape | tee -a "$OUT/gpu_step.md"
}
recipe() {  # nanoGPT's GPU recipe against ours, its table to $OUT (the pipe's status is the experiment's)
  limited $PYTHON experiments/exp_nanogpt.py --recipe gpu --device $DEVICE \
    $QUICK --nanogpt "$PACK/nanoGPT" --data "$PACK/tinyshakespeare.txt" --out $RUNS/recipe | tee "$OUT/recipe.md"
}
tests() {  # tests PYTEST_ARGS...: pytest for at most LIMIT seconds
  limited $PYTHON -m pytest -q -p no:cacheprovider "$@"
}

{
  echo "gpu_check: $(date -u '+%Y-%m-%d %H:%M UTC'), device $DEVICE, budget $BUDGET s, steps matching '$ONLY'"
  wheels=("$PACK"/wheels/*.whl)
  if [ ! -e "${wheels[0]}" ]; then
    echo "gpu_check: cannot start: no wheels in $PACK/wheels; run benchmarks/gpu_pack.sh where there is a network"
    exit 3
  fi
  if ! stale=$($PYTHON benchmarks/pack_sources.py check "$PACK/sources.sha256" 2>&1); then
    echo "gpu_check: cannot start: $stale; pack this tree again where there is a network:" \
      "bash benchmarks/gpu_pack.sh [NANOGPT_CLONE tinyshakespeare.txt]"
    exit 3
  fi
  rm -rf /tmp/site
  $PYTHON -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site "${wheels[@]}" \
    2>&1 | grep -v WARNING
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
  if ! $PYTHON -c "
import sys, torch, gpt_train.cli, gpt_task_reverse, gpt_kernel_flash
from importlib.metadata import version
click = version('click')
assert tuple(map(int, click.split('.')[:2])) >= (8, 2), f'click {click} is older than 8.2'
assert sys.argv[1] != 'cuda' or torch.cuda.is_available(), 'torch sees no CUDA device'
print('python', sys.version.split()[0], 'torch', torch.__version__, 'triton', version('triton'), 'click', click,
      torch.cuda.get_device_name() if sys.argv[1] == 'cuda' else sys.argv[1])
" "$DEVICE"; then
    echo "gpu_check: cannot start: the packages do not import as above"
    exit 3
  fi
  [ "$DEVICE" = cuda ] && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  have_nanogpt=$([ -f "$PACK/nanoGPT/model.py" ] && echo yes)
  have_text=$([ -f "$PACK/nanoGPT/data/shakespeare_char/train.bin" ] && echo yes)
  nanogpt_step() {  # nanogpt_step NAME ...: a step that needs the pack's nanoGPT
    if [ -n "$have_nanogpt" ]; then step "$@"; else unpacked "$1" nanoGPT; fi
  }

  step "verify triton" 150 triton_set gpt_train verify --device $DEVICE --kernels triton --seed 0
  step "sort on $DEVICE" 180 sort_eager
  step "KV cache on $DEVICE (6-layer)" 120 kv_cache --models 6l --batches 1 --rounds 3
  nanogpt_step "gpu_step against nanoGPT (6-layer)" 200 gpu_step small
  step "compiled graphs" 120 tests packages/gpt-core/tests/test_compile.py \
    packages/gpt-core/tests/test_triton_compiled_trace.py -k "compile_whole or (compiled_trace and not eager_draws)"
  step "sort on $DEVICE (compiled)" 200 sort_compiled
  step "verify fast, compiled" 150 gpt_train verify --device $DEVICE --compile --seed 0
  step "verify reference, compiled" 150 gpt_train verify --device $DEVICE --compile --kernels reference --seed 0
  step "accelerator tests" 240 tests packages/gpt-train/tests/test_accelerators.py \
    packages/gpt-core/tests/test_compile.py packages/gpt-core/tests/test_kv_cache_and_generate.py \
    packages/gpt-core/tests/test_static_decoding.py -k "cuda or accelerator"
  step "triton tests" 240 triton_set tests packages/gpt-core/tests/test_triton_set.py \
    packages/gpt-core/tests/test_triton_attention.py packages/gpt-core/tests/test_triton_kernels.py
  step "modadd on $DEVICE" 180 modadd
  nanogpt_step "gpu_step against nanoGPT (GPT-2 124M)" 300 gpu_step gpt2
  step "KV cache on $DEVICE (GPT-2 124M)" 300 kv_cache --models gpt2 --batches 1 8 --rounds 2 --min-rounds 1 --budget 45
  if [ -n "$have_text" ]; then step "shakespeare_char recipe against nanoGPT" 420 recipe
  else unpacked "shakespeare_char recipe against nanoGPT" "nanoGPT with its prepared text"; fi

  [ $ran -eq 0 ] && echo "gpu_check: no step ran (ONLY='$ONLY')"
  if [ ${#failed[@]} -gt 0 ]; then printf 'gpu_check: FAILED: %s\n' "${failed[@]}"; fi
  if [ ${#skipped[@]} -gt 0 ]; then printf 'gpu_check: SKIPPED (no time left): %s\n' "${skipped[@]}"; fi
  if [ $ran -gt 0 ] && [ ${#failed[@]} -eq 0 ] && [ ${#skipped[@]} -eq 0 ]; then
    echo "gpu_check: every step passed"
    exit 0
  fi
  exit 1
} 2>&1 | tee "$OUT/gpu_check.log"  # the block runs in a subshell: its exit code (3: cannot start) is the script's
exit "${PIPESTATUS[0]}"

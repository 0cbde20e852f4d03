#!/bin/bash
# Count the ATen ops Megatron-DeepSpeed dispatches per layer (README.md here). Runs on the CPU.
# Usage: benchmarks/gpu/op_count/count.sh OUT_DIR
# Needs: `python3` on PATH with torch, deepspeed 0.16.2 and Megatron-DeepSpeed's imports, torchvision included (CPU builds are
# enough), `planner` on PATH, and these exported: MEGATRON_DS_DIR (the pinned commit, its
# megatron/data helpers built for that Python), DATA_PATH and TOKENIZER_MODEL (a SentencePiece dataset,
# e.g. from benchmarks/gpu/make_data.py).
set -euo pipefail
OUT=$(mkdir -p "${1:?usage: count.sh OUT_DIR}" && CDPATH= cd -P -- "$1" && pwd -P)
HERE="$(CDPATH= cd -P -- "$(dirname -- "$0")" && pwd -P)"
STAND_INS="$HERE/../stand_ins"
export PYTHONPATH="$HERE:$STAND_INS/apex:$STAND_INS/flash_attn${PYTHONPATH:+:$PYTHONPATH}"
export LAUNCHER=torchrun CHECKPOINT_PATH="$OUT/checkpoints" OMP_NUM_THREADS=1
for layers in 2 3; do
  sed "s/^num_layers: .*/num_layers: $layers/" "$HERE/layers.yaml" > "$OUT/layers$layers.yaml"
  planner plan --model "$OUT/layers$layers.yaml" --cluster H100-SXM --gpus 1 --global-batch 2 --seq-len 256 \
    --mbs 1 --zero 1 --recompute none --flash-attention true --precision bf16 --out "$OUT/job$layers" --force
  rm -f "$OUT/count$layers".*.json
  OP_COUNT_REPORT="$OUT/count$layers" bash "$OUT/job$layers/launch.sh" --train-iters 3 --lr-warmup-iters 1 \
    --log-interval 1 --save '' --eval-iters 0 --eval-interval 1000 --make-vocab-size-divisible-by 128 \
    > "$OUT/job$layers.log" 2>&1
done
python3 "$HERE/summarise.py" "$OUT"/count2.*.json "$OUT"/count3.*.json 2 3

#!/bin/bash
# Time the host's side of the emitted Megatron-DeepSpeed job on the CPU (README.md here).
# Usage: benchmarks/gpu/host_time/run.sh OUT_DIR NAME [NAME ...]
#   NAME is zZ-RECOMPUTE-mbsB-sS-lL-PRECISION, e.g. z0-full-mbs1-s64-l2-fp16 (ZeRO stage, recompute none/full,
#   micro batch, sequence, layers, bf16/fp16); 8 micro-batches per iteration, HOST_TIME_ITERS (6) iterations.
#   HOST_TIME_LAYERS=FILE times another layer (default layers.yaml, vTrain's), HOST_TIME_FLASH=true with FlashAttention;
#   HOST_SYNC=1 also counts where the job would make the host wait for the GPU (../mem_trace/host_syncs.py), and with
#   HOST_SYNC_BYTES=1 the bytes its ops move; HOST_TIME_GRAD_COMM=bf16 reduces gradients in bf16 (default fp32);
#   HOST_TIME_DP=2 trains on 2 workers (data parallel), each reporting.
# Needs what benchmarks/gpu/op_count/count.sh needs: python3 with torch, deepspeed 0.16.2 and Megatron-DeepSpeed's
# imports, `planner` on PATH, and MEGATRON_DS_DIR, DATA_PATH and TOKENIZER_MODEL exported.
set -euo pipefail
OUT=$(mkdir -p "${1:?usage: run.sh OUT_DIR NAME...}" && CDPATH= cd -P -- "$1" && pwd -P)
shift
HERE="$(CDPATH= cd -P -- "$(dirname -- "$0")" && pwd -P)"
. "$HERE/../stand_ins/pythonpath.sh" "$HERE/../mem_trace" fused_softmax
# One thread: the ops are tiny, and the host's side of a GPU job is one Python thread.
export LAUNCHER=torchrun CHECKPOINT_PATH="$OUT/checkpoints" OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
# The GPT-2 layers take Megatron's GPT2BPETokenizer, which training uses for its vocabulary size and end-of-
# document id only (the data are token ids): without VOCAB_FILE / MERGE_FILE, a stand-in vocabulary of
# 8,192 entries, enough for benchmarks/gpu/make_data.py's 8,000-token data.
if [ -z "${VOCAB_FILE:-}" ]; then
  export VOCAB_FILE="$OUT/vocab.json" MERGE_FILE="$OUT/merges.txt"
  python3 -c 'import json, sys; json.dump({**{f"t{i}": i for i in range(8191)}, "<|endoftext|>": 8191}, open(sys.argv[1], "w"))' "$VOCAB_FILE"
  echo "#version: 0.2" > "$MERGE_FILE"
fi
for name in "$@"; do
  IFS=- read -r z rc mbs seq layers precision <<<"$name"
  z=${z#z}; mbs=${mbs#mbs}; seq=${seq#s}; layers=${layers#l}
  sed -e "s/^num_layers: .*/num_layers: $layers/" -e "s/^max_seq_len: .*/max_seq_len: $seq/" \
    "${HOST_TIME_LAYERS:-$HERE/layers.yaml}" > "$OUT/$name.yaml"
  dp=${HOST_TIME_DP:-1}
  planner plan --model "$OUT/$name.yaml" --cluster A100-80GB --gpus "$dp" --tp 1 --pp 1 --global-batch $((8 * mbs * dp)) \
    --seq-len "$seq" --mbs "$mbs" --zero "$z" --recompute "$rc" $( [ "$rc" = full ] && echo --recompute-layers 0 ) \
    --flash-attention "${HOST_TIME_FLASH:-false}" --precision "$precision" --grad-comm "${HOST_TIME_GRAD_COMM:-fp32}" \
    --out "$OUT/$name" --force > "$OUT/$name.plan.log"
  rm -f "$OUT/$name".*.json
  sync=""; [ "${HOST_SYNC:-0}" = 1 ] && sync="$OUT/$name.syncs"
  HOST_TIME_REPORT="$OUT/$name" HOST_SYNC_REPORT="$sync" bash "$OUT/$name/launch.sh" --train-iters "${HOST_TIME_ITERS:-6}" --lr-warmup-iters 1 \
    --log-interval 1 --save '' --eval-iters 0 --eval-interval 1000 --num-workers 0 > "$OUT/$name.log" 2>&1 \
    || { echo "$name: training failed, see $OUT/$name.log" >&2; exit 1; }
  ls "$OUT/$name".*.json
done

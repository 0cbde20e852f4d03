#!/bin/bash
# On a GPU machine without network: install what the jobs need from the carried folders, then train every
# job `python benchmarks/gpu_probe.py plan` wrote (benchmarks/gpu_probe.py run). Needs, at the repository root:
#   .whl/   DeepSpeed at the emitted pin built as a pure-Python wheel (DS_BUILD_OPS=0) and the pure-Python
#           packages it and Megatron-DeepSpeed import that the machine lacks (scripts/gpu_pack.sh)
#   .gpu/Megatron-DeepSpeed   Megatron-DeepSpeed at the pinned commit (never committed here)
#   .gpu/jobs                 the planned jobs
# NVIDIA apex and flash-attn, where not installed, are replaced by benchmarks/gpu/stand_ins (see its README).
# Usage: scripts/gpu_probe.sh OUT_DIR [benchmarks/gpu_probe.py run options, e.g. --skip NAME,NAME]
set -euo pipefail
OUT=${1:?usage: scripts/gpu_probe.sh OUT_DIR [run options]}
shift
ROOT="$(CDPATH= cd -P -- "$(dirname -- "$0")/.." && pwd -P)"
SITE=/tmp/gpu_probe_site
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" "$ROOT"/.whl/*.whl
export PATH="$SITE/bin:$PATH"
PYPATH="$ROOT/benchmarks/gpu/probe_hook:$SITE"
python3 -c "import apex.normalization, amp_C" 2>/dev/null || PYPATH="$PYPATH:$ROOT/benchmarks/gpu/stand_ins/apex"
python3 -c "import flash_attn" 2>/dev/null || PYPATH="$PYPATH:$ROOT/benchmarks/gpu/stand_ins/flash_attn"
export PYTHONPATH="$PYPATH${PYTHONPATH:+:$PYTHONPATH}"
export MEGATRON_DS_DIR="$ROOT/.gpu/Megatron-DeepSpeed"
# Megatron builds its dataset helpers with make at start (megatron/data/Makefile); a prebuilt module newer
# than helpers.cpp is kept. The Makefile names the module through python3-config, which a venv may lack.
touch "$MEGATRON_DS_DIR"/megatron/data/helpers*.so 2>/dev/null || true
if ! command -v python3-config >/dev/null; then
  mkdir -p /tmp/gpu_probe_bin
  printf '#!/bin/sh\nexec python3 -c "import sysconfig; print(sysconfig.get_config_var(\\"EXT_SUFFIX\\"))"\n' \
    >/tmp/gpu_probe_bin/python3-config
  chmod +x /tmp/gpu_probe_bin/python3-config
  export PATH="/tmp/gpu_probe_bin:$PATH"
fi
echo "PYTHONPATH=$PYTHONPATH"
exec python3 "$ROOT/benchmarks/gpu_probe.py" run --out "$OUT" "$@"

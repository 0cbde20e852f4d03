# Sourced by ../mem_trace/run.sh and ../host_time/run.sh: puts a hook directory ($1), the apex and flash_attn
# stand-ins, any further stand-in directories named after it, and the torchvision stand-in where PyPI's
# torchvision does not load beside the CPU build of torch, in front of PYTHONPATH.
_stand_ins="$(CDPATH= cd -P -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd -P)"
_path="$1:$_stand_ins/apex:$_stand_ins/flash_attn"
shift
for _dir in "$@"; do _path="$_path:$_stand_ins/$_dir"; done
python3 -c "import torchvision" 2>/dev/null || _path="$_path:$_stand_ins/torchvision"
export PYTHONPATH="$_path${PYTHONPATH:+:$PYTHONPATH}"
unset _stand_ins _path _dir

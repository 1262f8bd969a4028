#!/usr/bin/env bash
# The GPU check: on a machine with CUDA, the tests marked `gpu`, the Learner against a raw loop
# on one GPU (benchmarks/gpu_speed.py: the MLP and a ~51M GPT-2 in bf16, with and without
# compile; host syncs per step; peak memory) and the DDP / FSDP / precision benchmarks with 1 GPU
# (and 2 when there are 2 or more), one line per figure, in under 10 minutes (each step has its
# own time limit; they add up to 570 s at most). Without CUDA it says so and exits 0. Exit 1
# when a step failed.
#
#     benchmarks/gpu_check.sh            # from the repository root; PYTHON=... to choose one
set -u
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-.venv/bin/python}
[ -x "$PYTHON" ] || PYTHON=python

gpus=$("$PYTHON" -c 'import torch; print(torch.cuda.device_count() if torch.cuda.is_available() else 0)' 2>/dev/null || echo 0)
if [ "$gpus" -eq 0 ]; then
    echo "gpu_check: no CUDA device here (torch.cuda.is_available() is False): nothing to check"
    exit 0
fi
counts="1"
[ "$gpus" -ge 2 ] && counts="1 2"
echo "gpu_check: $gpus CUDA device(s): $("$PYTHON" -c 'import torch; print(torch.cuda.get_device_name(0), "torch", torch.__version__)')"
status=0

step() {  # step LIMIT_SECONDS LABEL COMMAND...: run it, print its figure lines with LABEL
    local limit=$1 label=$2
    shift 2
    local output
    output=$(timeout "$limit" "$@" 2>&1)
    local rc=$?
    if [ $rc -ne 0 ]; then
        local why="exit $rc"
        [ $rc -eq 124 ] && why="over its ${limit} s"
        echo "$label: FAILED ($why):"
        echo "$output" | tail -n 15 | sed 's/^/    /'
        status=1
    else
        echo "$output" | grep -v -i "warning" | sed "s/^/$label: /"
    fi
}

# limits: 80 + 270 (gpu_speed) + 2 x 45 (ddp) + 2 x 45 (fsdp) + 2 x 20 (precision) = 570 s
step 80 "pytest -m gpu" "$PYTHON" -m pytest -q -m gpu -p no:cacheprovider tests
step 270 "gpu_speed.py" env PYTHONPATH=benchmarks "$PYTHON" benchmarks/gpu_speed.py --quick
for n in $counts; do
    step 45 "ddp.py, $n GPU" env PYTHONPATH=benchmarks "$PYTHON" benchmarks/ddp.py --quick --gpus "$n"
done
for bench in fsdp:45 precision:20; do  # only where the benchmark has a GPU mode (--gpus N)
    limit=${bench#*:}
    bench=${bench%:*}
    if [ ! -f "benchmarks/$bench.py" ] || ! grep -q -- '--gpus' "benchmarks/$bench.py"; then
        echo "$bench.py: no --gpus mode in this checkout: skipped"
        continue
    fi
    for n in $counts; do
        step "$limit" "$bench.py, $n GPU" env PYTHONPATH=benchmarks "$PYTHON" "benchmarks/$bench.py" --quick --gpus "$n"
    done
done
exit $status

#!/usr/bin/env bash
# dp_cpu.sh: data-parallel training on this machine's CPUs (issue 18): one
# process with 2 threads against 2 MPI ranks with 1 thread each (mpirun over
# loopback TCP), the MNIST MLP at global batch 64 and 256, STEPS optimizer
# steps each (evaluation excluded from the timing). Prints samples/s and the
# rank-0 time inside the gradient all-reduce per step. From the repository
# root, after `bazel build //cli:gcc-train`:
#
#   bench/dp_cpu.sh [STEPS] [RUNS]
set -euo pipefail
cd "$(dirname "$0")/.."
STEPS=${1:-300}
RUNS=${2:-3}
GT=bazel-bin/cli/gcc-train
export OMP_WAIT_POLICY=passive
export OMPI_MCA_btl=self,tcp OMPI_MCA_pml=ob1 OMPI_MCA_btl_tcp_if_include=lo
export OMPI_MCA_oob_tcp_if_include=lo
MPIRUN=(mpirun --allow-run-as-root --oversubscribe --bind-to none)
echo "date: $(date -u +%FT%TZ); load average before: $(cut -d' ' -f1-3 /proc/loadavg); $(nproc) CPUs"
for batch in 64 256; do
  for run in $(seq "$RUNS"); do
    for mode in "1x2" "2x1"; do
      args=(models/mnist_mlp.pb --device cpu --epochs 1 --max-steps "$STEPS" --batch-size "$batch"
            --log-every 0 --no-output --seed 1)
      if [[ $mode == 1x2 ]]; then
        out=$("$GT" "${args[@]}" --threads 2 2>&1)
      else
        out=$("${MPIRUN[@]}" -np 2 "$GT" "${args[@]}" --threads 1 2>&1)
      fi
      sps=$(grep -o '[0-9]* samples/s; test' <<<"$out" | grep -o '^[0-9]*')
      ar=$(grep -o '([0-9.]* ms per step)' <<<"$out" | grep -o '[0-9.]*' || echo -)
      printf 'batch %4d  %s  run %d: %8s samples/s  all-reduce %s ms/step\n' "$batch" \
        "$([[ $mode == 1x2 ]] && echo '1 process x 2 threads' || echo '2 processes x 1 thread')" \
        "$run" "$sps" "$ar"
    done
  done
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"

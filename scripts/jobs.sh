#!/usr/bin/env bash
# How many compile jobs this machine can run at once: one per core, but no more than its free
# memory holds. Each job that includes LibTorch loads the kit's precompiled header (~620 MB on
# disk) and peaks at 1.1 to 1.6 GB of memory (measured; a unity batch of 8 files: 1.4 to 1.55
# GB), so an unbounded `-j` swaps a 4-core, 8 GB laptop; each job is allowed KIT_JOB_MB
# (default 1600) MB. Used by scripts/test.sh,
# main_job.sh and pipeline_job.sh:
#   cmake --build build -j "$(scripts/jobs.sh)"
set -euo pipefail
cores=$(nproc 2>/dev/null || echo 2)
per_job_kb=$(( ${KIT_JOB_MB:-1600} * 1024 ))
avail_kb=$(awk '/^MemAvailable:/ {print $2}' /proc/meminfo 2>/dev/null || true)
jobs=$cores
if [[ -n "$avail_kb" ]]; then
  by_memory=$(( avail_kb / per_job_kb ))
  (( by_memory < jobs )) && jobs=$by_memory
fi
(( jobs < 1 )) && jobs=1
echo "$jobs"

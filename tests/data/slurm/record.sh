#!/bin/bash
# Record what a real Slurm 22.05 prints, for gpuyard's byte-for-byte renderer tests.
#
# Usage (as root, Debian 12, packages from the recipe installed):
#     tests/data/slurm/record.sh [RECIPE_DIR]
#     KEEP=1 tests/data/slurm/record.sh          # keep the raw outputs in /tmp/gpuyard-slurm-record.*
#     tests/data/slurm/record.sh --convert /tmp/gpuyard-slurm-record.XXXX   # cases again, no Slurm
#     SCENARIO=het tests/data/slurm/record.sh   # heterogeneous jobs (scenario_het.sh): het_*.json only
#     SCENARIO=het tests/data/slurm/record.sh --convert /tmp/gpuyard-slurm-record.XXXX
# RECIPE_DIR defaults to ../shared/slurm-recipe next to the repository (gen-conf.sh, start.sh,
# start-accounting.sh, stop.sh). It starts a 4-node real Slurm with accounting (4 x 64 CPUs x
# 8 fake GPUs), runs a fixed scenario, writes tests/data/slurm/cases/*.json and stops every
# daemon by PID file on exit. It drops the accounting database (slurm_acct_db) first, so sacct
# shows only this run's jobs (slurmctld keeps counting job ids). Everything runs with TZ=UTC.
set -euo pipefail
export TZ=UTC LC_ALL=C.UTF-8
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../../.." && pwd)
RECIPE=${1:-$REPO/../shared/slurm-recipe}
CASES="$HERE/cases"
NNODES=4
PYTHON=${PYTHON:-python3}
# SCENARIO=het: the heterogeneous-job scenario (scenario_het.sh), which writes only cases/het_*.json
SCENARIO=${SCENARIO:-default}
case "$SCENARIO" in
  default | het) ;;
  *) echo "record.sh: SCENARIO must be default or het" >&2; exit 1 ;;
esac

# raw outputs + facts -> cases/*.json (convert.py; also alone: record.sh --convert WORKDIR, from a
# KEEP=1 run). A scenario owns its cases: "het" writes only het_*.json, "default" all the others,
# so recording one never deletes the other's.
convert() {
"$PYTHON" "$HERE/convert.py" "$1" "$2" "$3"
}
clear_cases() { # remove this scenario's cases only
  mkdir -p "$CASES"
  if [ "$SCENARIO" = het ]; then
    find "$CASES" -maxdepth 1 -name 'het_*.json' -delete
  else
    find "$CASES" -maxdepth 1 -name '*.json' ! -name 'het_*.json' -delete
  fi
}
if [ "${1:-}" = --convert ]; then
  clear_cases
  if [ -f "$2/version" ]; then v=$(cat "$2/version"); else v=$(cat "$2/raw/sinfo_version/stdout"); fi
  convert "$2/raw" "$CASES" "$v"
  exit 0
fi

[ "$(id -u)" = 0 ] || { echo "record.sh: run as root" >&2; exit 1; }
RECIPE=$(cd "$RECIPE" && pwd)
for f in gen-conf.sh start.sh start-accounting.sh stop.sh; do
  [ -f "$RECIPE/$f" ] || { echo "record.sh: $RECIPE/$f missing" >&2; exit 1; }
done

WORK=$(mktemp -d /tmp/gpuyard-slurm-record.XXXXXX)
RAW="$WORK/raw"
mkdir -p "$RAW" "$WORK/jobs"
cp /etc/hosts "$WORK/hosts.orig"

cleanup() {
  set +e
  if scontrol ping >/dev/null 2>&1; then
    scancel --user=root >/dev/null 2>&1
    for _ in $(seq 1 60); do
      [ -z "$(squeue -h -t pending,running,completing,suspended -o %i 2>/dev/null)" ] && break
      sleep 1
    done
  fi
  "$RECIPE/stop.sh" >/dev/null 2>&1
  cmp -s /etc/hosts "$WORK/hosts.orig" || cp "$WORK/hosts.orig" /etc/hosts
  if [ "${KEEP:-0}" = 1 ]; then echo "record.sh: kept $WORK" >&2; else rm -rf "$WORK"; fi
}
trap cleanup EXIT

log() { echo "[record $(date +%T)] $*" >&2; }

# --- 1. a small real Slurm with accounting ---------------------------------------------------
log "config + daemons"
SCHED_PARAMS="batch_sched_delay=0" ACCOUNTING=1 "$RECIPE/gen-conf.sh" "$NNODES" 64 8 >/dev/null
# .extern steps, as on most real clusters (slurmctld logs a harmless pam_slurm_adopt warning)
echo "PrologFlags=Contain" >>/etc/slurm/slurm.conf
"$RECIPE/start-accounting.sh" >/dev/null
# a fresh accounting database: job ids restart at 1 and sacct shows only this run's jobs
[ -f /run/slurm/slurmdbd.pid ] && kill "$(cat /run/slurm/slurmdbd.pid)" && sleep 2
mysql -u root -e 'DROP DATABASE IF EXISTS slurm_acct_db'
"$RECIPE/start-accounting.sh" >/dev/null
"$RECIPE/start.sh" "$NNODES" >/dev/null
VERSION=$(sinfo --version)
echo "$VERSION" >"$WORK/version"
log "$VERSION up"

cd "$WORK/jobs"
sub() { sbatch --parsable "$@"; }
state() { squeue -h -t all -j "$1" -o %T 2>/dev/null | head -n1; }
wait_state() { # JOBID STATE [TIMEOUT_S]
  local t
  for t in $(seq 1 "${3:-120}"); do
    [ "$(state "$1")" = "$2" ] && return 0
    sleep 1
  done
  echo "record.sh: job $1 never reached $2 (is $(state "$1"))" >&2
  return 1
}

rec_n=0
rec() { # NAME KIND CMD...   run once, keep argv/stdout/stderr/rc and the second it ran in
  # (retried until it starts and ends in one second; ONCE=1 for commands that must run once)
  local name=$1 kind=$2 i t0 t1 rc
  shift 2
  mkdir -p "$RAW/$name"
  for i in 1 2 3 4 5; do
    t0=$(date +%s)
    set +e
    "$@" >"$RAW/$name/stdout" 2>"$RAW/$name/stderr"
    rc=$?
    set -e
    t1=$(date +%s)
    [ "$t0" = "$t1" ] || [ "${ONCE:-0}" = 1 ] && break
  done
  printf '%s\n' "$@" >"$RAW/$name/argv"
  echo "$rc" >"$RAW/$name/rc"
  echo "$t0" >"$RAW/$name/now"
  echo "$kind" >"$RAW/$name/kind"
  rec_n=$((rec_n + 1))
}

# sacct: the selection comes before "--", the format after; the facts are the same selection
# printed with every field (and `scontrol show job -o`, for the het fields of jobs still held)
rec_sacct() {
  local name=$1 sel=() fmt=()
  shift
  while [ $# -gt 0 ] && [ "$1" != -- ]; do sel+=("$1"); shift; done
  [ $# -gt 0 ] && shift
  fmt=("$@")
  rec "$name" sacct sacct "${sel[@]}" "${fmt[@]}"
  sacct "${sel[@]}" -P --format=ALL >"$RAW/$name/sacct_all" 2>/dev/null || true
  scontrol show job -o >"$RAW/$name/jobs" 2>/dev/null || true
}
# squeue: the facts are `scontrol show job -o` and the ids the same selection lists, in order
rec_squeue() {
  local name=$1 sel=() fmt=()
  shift
  while [ $# -gt 0 ] && [ "$1" != -- ]; do sel+=("$1"); shift; done
  [ $# -gt 0 ] && shift
  fmt=("$@")
  rec "$name" squeue squeue "${sel[@]}" "${fmt[@]}"
  squeue "${sel[@]}" -h -o %i >"$RAW/$name/ids" 2>/dev/null || true
  scontrol show job -o >"$RAW/$name/jobs" 2>/dev/null || true
}
# scontrol: the facts are `scontrol show job -o`
rec_scontrol() {
  local name=$1
  shift
  rec "$name" scontrol scontrol "$@"
  scontrol show job -o >"$RAW/$name/jobs" 2>/dev/null || true
}

if [ "$SCENARIO" = het ]; then
  . "$HERE/scenario_het.sh" # runs the het scenario and writes cases/het_*.json
  exit 0
fi

# --- 2. the scenario -------------------------------------------------------------------------
log "scenario"
scontrol update NodeName=n0004 State=DRAIN Reason="maintenance window"
J_TO=$(sub -J timeout_job -t 1 --wrap 'sleep 300')
J_C1=$(sub -J one_node --wrap 'srun true')
J_C2=$(sub -J two_nodes -N2 --wrap 'srun hostname')
J_F=$(sub -J fails --wrap 'srun sh -c "exit 3"; exit 3')
J_CA=$(sub -J cancel_me --wrap 'srun sleep 600')
J_RQ=$(sub -J requeue_me --wrap 'sleep 15')
# the recipe's envtest.sh shape (2 nodes x 2 tasks, 2 GPUs a node), printing the whole
# SLURM_*/SRUN_*/CUDA/GPU environment of the batch shell and of every srun task, one a line
cat >envtest.sh <<'SH'
#!/bin/bash
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=2
#SBATCH --gpus-per-node=2
#SBATCH --output=%j.out
env | grep -E '^(SLURM|SRUN|CUDA|GPU)' | sort
srun --unbuffered --output %j_%t.out bash -c "env | grep -E '^(SLURM|SRUN|CUDA|GPU)' | sort"
SH
J_ENV=$(sub -J envtest envtest.sh)
printf '#!/bin/bash\n#SBATCH -J plain_script\ntrue\n' >job.sh
# sbatch's own outputs (jobs that just run `true`)
rec sbatch_plain sbatch sbatch job.sh
rec sbatch_parsable sbatch sbatch --parsable job.sh

wait_state "$J_CA" RUNNING
wait_state "$J_RQ" RUNNING
sleep 2
scancel "$J_CA"
scontrol requeue "$J_RQ"
wait_state "$J_RQ" PENDING
rec scontrol_show_job_requeued scontrol scontrol show job "$J_RQ"
scontrol show job -o >"$RAW/scontrol_show_job_requeued/jobs"
# Slurm holds a requeued job for 121 s (BeginTime); let it go now
scontrol update JobId="$J_RQ" StartTime=now
wait_state "$J_ENV" COMPLETED
wait_state "$J_RQ" COMPLETED 120
log "waiting for the TIMEOUT job (about a minute)"
wait_state "$J_TO" TIMEOUT 180

# salloc while the cluster is idle (it runs its command here, on the submit host): the
# allocation's environment, a step launched in it, the command's exit status
ONCE=1 rec salloc_env salloc salloc -N2 --ntasks-per-node=2 -J alloc \
  bash -c "env | grep -E '^(SLURM|SRUN)' | sort"
ONCE=1 rec salloc_srun_exit salloc salloc -N2 bash -c 'srun hostname | sort; exit 3'
ONCE=1 rec salloc_true salloc salloc true

# the jobs that are still there when the outputs are recorded
J_EX=$(sub -J exclusive --exclusive -N1 --wrap 'sleep 900')
J_ARR=$(sub --array=0-9%2 --wrap 'sleep 900')
J_LONG=$(sub -J a_very_long_job_name_for_truncation -N2 --ntasks-per-node=2 --gpus-per-node=2 \
  -t 2-00:00:00 --wrap 'srun sleep 900')
J_HOLD=$(sub -J held --hold -t 30 --wrap 'true')
wait_state "$J_EX" RUNNING
wait_state "$J_LONG" RUNNING
wait_state "${J_ARR}_1" RUNNING
J_BIG=$(sub -J big -N3 --exclusive --wrap 'sleep 10')
J_BIG2=$(sub -J big2 -N3 --exclusive --wrap 'sleep 10')
for _ in $(seq 1 60); do # until the scheduler has given both a reason
  r=$(squeue -h -j "$J_BIG,$J_BIG2" -o %r | sort | tr '\n' ' ')
  [ "$r" = "Priority Resources " ] && break
  sleep 1
done
sleep 3 # the srun step of the long job is registered

# --- 3. the outputs --------------------------------------------------------------------------
log "recording outputs"
ALL_J=()
for j in "$J_C1" "$J_C2" "$J_F" "$J_CA" "$J_ARR" "$J_TO" "$J_RQ" "$J_LONG" "$J_HOLD" "$J_BIG"; do
  ALL_J+=(-j "$j")
done
CSV="$J_C1,$J_C2,$J_F,$J_CA,$J_ARR,$J_TO,$J_RQ,$J_LONG,$J_HOLD,$J_EX"

# sacct
rec_sacct sacct_submitit "${ALL_J[@]}" -- -o JobID,State,NodeList --parsable2
rec_sacct sacct_submitit_array -j "$J_ARR" -- -o JobID,State,NodeList --parsable2
rec_sacct sacct_default_parsable2 -j "$J_C2" -- --parsable2
rec_sacct sacct_default_parsable2_all -j "$CSV" -- --parsable2
rec_sacct sacct_default_table -j "$J_C2" --
rec_sacct sacct_default_table_all -j "$CSV" --
rec_sacct sacct_X -X -j "$CSV" --
rec_sacct sacct_noheader -j "$CSV" -- -n
rec_sacct sacct_P_fields -j "$CSV" -- -P \
  -o JobID,JobIDRaw,JobName,State,NodeList,ExitCode,Start,End,Elapsed,Partition,Account,AllocCPUS
rec_sacct sacct_table_fields -j "$CSV" -- \
  -o JobID,JobIDRaw,JobName,State,NodeList,ExitCode,Start,End,Elapsed,Partition,Account,AllocCPUS
rec_sacct sacct_widths -j "$CSV" -- -o JobID%20,JobName%40,state%8,nodelist%5,exitcode%3
rec_sacct sacct_more_fields -j "$CSV" -- \
  -o jobid,user,uid,group,gid,nnodes,ncpus,ntasks,submit,eligible,timelimit,priority,qos,reason
rec_sacct sacct_parsable -j "$J_C1" -- --parsable
rec_sacct sacct_parsable_noheader -j "$J_C1,$J_F" -- --parsable -n -o JobID,State,ExitCode
rec_sacct sacct_requeued -j "$J_RQ" -- -P -o JobID,State,NodeList,Start,End,ExitCode
rec_sacct sacct_requeued_D -D -j "$J_RQ" -- -P -o JobID,State,NodeList,Start,End,ExitCode
rec_sacct sacct_requeued_D_table -D -j "$J_RQ" --
rec_sacct sacct_X_P_jobidraw -X -j "$CSV" -- --parsable2 --noheader --format=JobIdRaw,State
rec_sacct sacct_no_such_job -j 999999 --
rec_sacct sacct_X_array -X -j "$J_ARR" -- -P
rec_sacct sacct_prefix_fields -j "$J_C1,$J_F" -- -o jobn,stat,exit -P
rec_sacct sacct_bad_field -j "$J_C1" -- -o JobID,Bogus
rec sacct_bad_jobid sacct sacct -j abc
# openapi v0.0.38 documents: torchx lists with `sacct --json -S1970-01-01-00:00:01`
rec_sacct sacct_json -j "$CSV" -- --json
rec_sacct sacct_json_torchx -S1970-01-01-00:00:01 -- --json
rec_sacct sacct_json_X -X -j "$J_C1,$J_ARR" -- --json

# squeue
rec_squeue squeue_default --
rec_squeue squeue_all -t all --
rec_squeue squeue_j_array -j "$J_ARR" --
rec_squeue squeue_j_long -j "$J_LONG" --
rec_squeue squeue_h_it -- -h -o '%i %t'
rec_squeue squeue_nextflow -t all -- --noheader -o '%i %t'
rec_squeue squeue_snakemake --states=all -- --format='%i|%T' --noheader
rec_squeue squeue_default_format -- -o '%.18i %.9P %.8j %.8u %.2t %.10M %.6D %R'
rec_squeue squeue_plain_codes -t all -- -o '%i %t %T %j %u %P %M %D %R %N'
rec_squeue squeue_more_codes -t all -- -o '%i|%l|%C|%b|%r|%S|%V|%a|%A|%K|%F|%Q|%Z|%o|%e|%L|%y|%q|%g|%G|%U|%c|%m|%E|%k|%h'
rec_squeue squeue_widths -t all -- -o '%10j|%.10j|%.5i|%5T|%3t|%.30R|%20N|%.3D'
rec_squeue squeue_bad_width -t all -- -o '%-10j|%10j|%-3t'
rec_squeue squeue_header_only -j "$J_C1" -- -o '%i %j'
rec_squeue squeue_u_root -u root --
rec_squeue squeue_states_pd -t PD --
rec_squeue squeue_json -j "$J_ARR" -- --json
rec_squeue squeue_json_all -- --json
rec squeue_no_such_job squeue squeue -j 999999
rec_squeue squeue_bad_format -- -o '%i %!'

# sinfo: the facts are nodes and partitions
rec_sinfo() {
  local name=$1
  shift
  rec "$name" sinfo sinfo "$@"
  scontrol show node -o >"$RAW/$name/nodes" 2>/dev/null || true
  scontrol show partition -o >"$RAW/$name/partitions" 2>/dev/null || true
}
rec_sinfo sinfo_default
rec_sinfo sinfo_version --version
rec_sinfo sinfo_h -h
rec_sinfo sinfo_torchx --format %P,%m --noconvert
rec_sinfo sinfo_mem --format %P,%m
rec_sinfo sinfo_o -o '%P %m %A %D %T %N'
rec_sinfo sinfo_o2 -o '%P %c %G %l %a %D %t'
rec_sinfo sinfo_widths -o '%.20P|%8T|%.5D|%3N|%F'
rec_sinfo sinfo_bad_width -o '%.20P|%-8T|%5D|%N'
rec_sinfo sinfo_N -N
rec_sinfo sinfo_N_o -N -o '%N %T %c %m %G %P'
rec_sinfo sinfo_R -R
rec_sinfo sinfo_s -s

# scontrol
rec_scontrol scontrol_show_job_pending show job "$J_HOLD"
rec_scontrol scontrol_show_job_running show job "$J_LONG"
rec_scontrol scontrol_show_job_completed show job "$J_C2"
rec_scontrol scontrol_show_job_array_task show job "${J_ARR}_0"
rec_scontrol scontrol_show_hostnames show hostnames 'n[0001-0003,0010]'
rec_scontrol scontrol_show_hostnames_mixed show hostnames 'n[0001-0002],gpu7,n0099,x,n[9-11]'
rec_scontrol scontrol_show_hostnames_suffix show hostnames 'a[08-10]b'
rec_scontrol scontrol_show_hostnames_reversed show hostnames 'n[3-1]'
rec_scontrol scontrol_show_hostnames_unbalanced show hostnames 'n[1-2'
rec_scontrol scontrol_show_hostlist show hostlist n0001,n0002,n0003
rec_scontrol scontrol_show_hostlist_mixed show hostlist n0003,n0001,n0002,n0010,gpu7,gpu8,x
rec_scontrol scontrol_show_hostlist_interleaved show hostlist n1,gpu1,n2
rec_scontrol scontrol_show_hostlist_widths show hostlist n9,n10,n11,n09,n010
rec_scontrol scontrol_show_hostlist_dups show hostlist 'n1,n1,n2,n[1-3]'
rec_scontrol scontrol_show_job_no_such show job 999999
rec_scontrol scontrol_requeue_no_such requeue 999999
rec_scontrol scontrol_requeue_bad_id requeue abc

# errors of the other commands
rec scancel_no_such scancel scancel 999999
rec scancel_bad_id scancel scancel abc
rec sbatch_unknown_option sbatch sbatch --bogus-option job.sh
rec sbatch_bad_time sbatch sbatch -t abc job.sh
rec sbatch_no_script sbatch sbatch /nonexistent/job.sh

# the SLURM_* environment of the batch shell and of every srun task (recipe's envtest.sh)
mkdir -p "$RAW/env_2x2"
cp envtest.sh "$RAW/env_2x2/script"
cat "$J_ENV.out" >"$RAW/env_2x2/batch_out"
for t in 0 1 2 3; do cat "${J_ENV}_$t.out" >"$RAW/env_2x2/task_$t"; done
scontrol show job -o "$J_ENV" >"$RAW/env_2x2/jobs" 2>/dev/null || true
echo "$J_ENV" >"$RAW/env_2x2/job_id"

log "$rec_n outputs recorded; writing cases"
# --- 4. raw outputs + facts -> cases/*.json --------------------------------------------------
clear_cases
convert "$RAW" "$CASES" "$VERSION"
log "done"

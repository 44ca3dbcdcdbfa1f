# The heterogeneous-job (hetjob) scenario of record.sh: `SCENARIO=het tests/data/slurm/record.sh`.
# Sourced by record.sh once the daemons are up and its helpers (sub, wait_state, rec, rec_sacct,
# rec_squeue, rec_scontrol) are defined; it writes only cases/het_*.json. No node is drained.
# Hetjobs are started by the backfill scheduler only (bf_interval, 30 s by default), so every
# wait here polls with a timeout.

log "het scenario"

# every component of JOB (a hetjob's rows in squeue) is in STATE
het_state() { squeue -h -t all -j "$1" -o %T 2>/dev/null | sort -u | tr '\n' ' '; }
wait_het() { # JOBID STATE [TIMEOUT_S]
  local t
  for t in $(seq 1 "${3:-150}"); do
    [ "$(het_state "$1")" = "$2 " ] && return 0
    sleep 1
  done
  echo "record.sh: hetjob $1 never reached $2 (is $(het_state "$1"))" >&2
  return 1
}
wait_gone() { # JOBID [TIMEOUT_S]: no component pending, running, completing any more
  local t
  for t in $(seq 1 "${2:-150}"); do
    [ -z "$(squeue -h -j "$1" -t pending,running,completing,configuring,suspended -o %i 2>/dev/null)" ] &&
      return 0
    sleep 1
  done
  echo "record.sh: hetjob $1 still there ($(het_state "$1"))" >&2
  return 1
}
wait_for() { # TIMEOUT_S CMD...: until CMD succeeds
  local t limit=$1
  shift
  for t in $(seq 1 "$limit"); do
    "$@" && return 0
    sleep 1
  done
  echo "record.sh: timed out waiting for: $*" >&2
  return 1
}

# the body of both env jobs: the batch shell's environment (the pattern of env_2x2, which also
# takes SLURMD_NODENAME), a het step in which every task of
# every component writes its environment (task-<job>-<component>-<procid>.env), a step in
# component 1 only, a plain srun; then it waits for release-<job> (so that it is seen running)
BODY=$(
  cat <<'SH'
env | grep -E '^(SLURM|SRUN|CUDA|GPU)' | sort >"batch-$SLURM_JOB_ID.env"
srun --output=slurm-"$SLURM_JOB_ID"-a.out --error=slurm-"$SLURM_JOB_ID"-a.err --wait=60 --kill-on-bad-exit=1 sh -c 'env | grep -E "^(SLURM|SRUN|CUDA|GPU)" | sort >"task-$SLURM_JOB_ID-0-$SLURM_PROCID.env"' : --output=slurm-"$SLURM_JOB_ID"-b.out --error=slurm-"$SLURM_JOB_ID"-b.err sh -c 'env | grep -E "^(SLURM|SRUN|CUDA|GPU)" | sort >"task-$SLURM_JOB_ID-1-$SLURM_PROCID.env"'
echo "het step: $?"
srun --het-group=1 hostname
echo "het-group=1 step: $?"
srun hostname
echo "plain step: $?"
for i in $(seq 1 600); do [ -e "release-$SLURM_JOB_ID" ] && break; sleep 1; done
SH
)
# torchx 0.7.0's shape: several options on one #SBATCH line, components split by `#SBATCH hetjob`
cat >torchx.sh <<SH
#!/bin/bash
#SBATCH --job-name=trainer-0 --requeue --ntasks-per-node=1 --cpus-per-task=2 --mem=1024 --gpus-per-task=1
#SBATCH hetjob
#SBATCH --job-name=ps-0 --requeue --ntasks-per-node=1 --cpus-per-task=1 --mem=512
$BODY
SH
# components of different sizes; only component 0 is named
cat >sizes.sh <<SH
#!/bin/bash
#SBATCH --job-name=sizes -N1 --ntasks-per-node=2 --gpus-per-node=2
#SBATCH hetjob
#SBATCH -N2 --ntasks-per-node=1 -c 2
$BODY
SH
# a step in each component that runs until cancelled
printf '#!/bin/bash\nsrun sleep 600 : sleep 600\n' >sleep.sh
# component 1 fails: in a step of its own (batch exits 0) / in a het step (batch exits with it)
cat >fail_step.sh <<'SH'
#!/bin/bash
#SBATCH --job-name=fail_step -N1 -n1
#SBATCH hetjob
#SBATCH -N1 -n1
srun --het-group=0 true
srun --het-group=1 sh -c 'exit 3'
echo "step: $?"
exit 0
SH
cat >fail_batch.sh <<'SH'
#!/bin/bash
#SBATCH --job-name=fail_batch -N1 -n1
#SBATCH hetjob
#SBATCH -N1 -n1
srun true : sh -c 'exit 3'
exit $?
SH

# --- submissions: sbatch's own outputs for a hetjob (each must run once) ----------------------
sbatch_rec() { # NAME ARGS...: a recorded sbatch; its facts are the job's components
  local name=$1
  shift
  ONCE=1 rec "$name" sbatch sbatch "$@"
  scontrol show job -o >"$RAW/$name/jobs" 2>/dev/null || true
  grep -oE '[0-9]+' "$RAW/$name/stdout" | tail -n1
}
J_TX=$(sbatch_rec het_sbatch_parsable --parsable torchx.sh)
J_SZ=$(sbatch_rec het_sbatch_plain sizes.sh)
J_CA=$(sbatch_rec het_sbatch_colon -N1 -n1 : -N1 -n1 sleep.sh)
J_CA1=$(sub -J cancel_one -N1 -n1 : -N1 -n1 sleep.sh)
J_RQ=$(sub -J requeue_me --requeue -N1 -n1 : -N1 -n1 sleep.sh)
J_FS=$(sub fail_step.sh)
J_FB=$(sub fail_batch.sh)
log "jobs: torchx $J_TX sizes $J_SZ cancel $J_CA cancel_one $J_CA1 requeue $J_RQ fails $J_FS $J_FB"
# right after submission: pending, until the backfill scheduler's next pass
rec_squeue het_squeue_pending -t all --

for j in "$J_TX" "$J_SZ" "$J_CA" "$J_CA1" "$J_RQ"; do wait_het "$j" RUNNING; done
wait_for 120 grep -q '^plain step:' "slurm-$J_TX.out"
wait_for 120 grep -q '^plain step:' "slurm-$J_SZ.out"
wait_gone "$J_FS"
wait_gone "$J_FB"
# the sleeping steps of both components are registered
steps_up() { [ "$(sacct -n -P -j "$1" -o JobID 2>/dev/null | grep -c '\.0$')" -ge 2 ]; }
for j in "$J_CA" "$J_CA1" "$J_RQ"; do wait_for 60 steps_up "$j"; done

# --- while running ----------------------------------------------------------------------------
log "recording running hetjobs"
rec_squeue het_squeue_default --
rec_squeue het_squeue_h_itj -- -h -o '%i %t %j'
rec_squeue het_squeue_pipe -- -o '%i|%T|%j|%N'
rec_squeue het_squeue_j -j "$J_TX" --
rec_squeue het_squeue_j_component -j "$J_TX+1" --
rec_squeue het_squeue_j_raw_component -j "$((J_TX + 1))" --
rec_squeue het_squeue_all_running -t all --
rec_squeue het_squeue_json -- --json
rec_scontrol het_scontrol_show_job show job "$J_TX"
rec_scontrol het_scontrol_show_job_o -o show job "$J_TX"
rec_scontrol het_scontrol_show_job_component show job "$J_TX+1"
rec_scontrol het_scontrol_show_job_raw_component show job "$((J_TX + 1))"
rec_scontrol het_scontrol_show_job_sizes show job "$J_SZ"
rec_sacct het_sacct_running -j "$J_TX" -- --parsable2

# --- scancel ----------------------------------------------------------------------------------
log "scancel"
ONCE=1 rec het_scancel_component scancel scancel "$J_CA1+1"
comp1_gone() { ! squeue -h -j "$J_CA1" -o %i 2>/dev/null | grep -q '+1$'; }
wait_for 60 comp1_gone
sleep 2 # its accounting record is written
rec_squeue het_squeue_after_cancel_component -j "$J_CA1" --
ONCE=1 rec het_scancel scancel scancel "$J_CA"
wait_gone "$J_CA"

# --- scontrol requeue -------------------------------------------------------------------------
log "requeue"
ONCE=1 rec_scontrol het_scontrol_requeue_component requeue "$J_RQ+1"
sleep 1
ONCE=1 rec_scontrol het_scontrol_requeue requeue "$J_RQ"
wait_het "$J_RQ" PENDING 60 || true
rec_squeue het_squeue_requeued -j "$J_RQ" --
rec_scontrol het_scontrol_show_job_requeued show job "$J_RQ"

# --- completion -------------------------------------------------------------------------------
log "releasing the env jobs"
touch "release-$J_TX" "release-$J_SZ"
wait_gone "$J_TX"
wait_gone "$J_SZ"
sleep 2 # the accounting records of the last steps are written

log "recording finished hetjobs"
FMT=JobID,JobIDRaw,JobName,State,NodeList,ExitCode
rec_sacct het_sacct_parsable2 -j "$J_TX" -- --parsable2
rec_sacct het_sacct_table -j "$J_TX" --
rec_sacct het_sacct_X_P -X -P -j "$J_TX" --
rec_sacct het_sacct_fields -P -j "$J_TX" -- --format=$FMT
rec_sacct het_sacct_json -j "$J_TX" -- --json
rec_sacct het_sacct_component -j "$J_TX+1" -- -P
rec_sacct het_sacct_raw_component -j "$((J_TX + 1))" -- -P
rec_sacct het_sacct_sizes -P -j "$J_SZ" -- \
  --format=JobID,JobIDRaw,JobName,State,NodeList,NNodes,NTasks,AllocCPUS,AllocTRES,ExitCode
rec_sacct het_sacct_cancelled -P -j "$J_CA" -- --format=$FMT
rec_sacct het_sacct_cancelled_component -P -j "$J_CA1" -- --format=$FMT
rec_sacct het_sacct_fail_step -P -j "$J_FS" -- --format=$FMT
rec_sacct het_sacct_fail_batch -P -j "$J_FB" -- --format=$FMT
rec_sacct het_sacct_fails_parsable2 -j "$J_FS,$J_FB" -- --parsable2
rec_sacct het_sacct_requeued -P -j "$J_RQ" -- --format=$FMT,Start,End
rec_sacct het_sacct_requeued_D -D -P -j "$J_RQ" -- --format=$FMT,Start,End
rec_sacct het_sacct_all_table -j "$J_TX,$J_SZ,$J_CA,$J_CA1,$J_FS,$J_FB,$J_RQ" --
rec_sacct het_sacct_X_all_table -X -j "$J_TX,$J_SZ,$J_CA,$J_CA1,$J_FS,$J_FB,$J_RQ" --
rec_squeue het_squeue_all -t all --
rec_scontrol het_scontrol_show_job_completed show job "$J_TX"
rec_scontrol het_scontrol_show_job_failed show job "$J_FB"
# a requeued job is held for 121 s (BeginTime): does StartTime=now work on a hetjob?
ONCE=1 rec_scontrol het_scontrol_update_starttime update JobId="$J_RQ" StartTime=now

# --- the environments -------------------------------------------------------------------------
env_case() { # NAME JOBID SCRIPT
  local d="$RAW/$1" f base
  mkdir -p "$d/tasks"
  cp "$3" "$d/script"
  printf '%s\n' sbatch "$3" >"$d/argv"
  cp "batch-$2.env" "$d/batch_env"
  cp "slurm-$2.out" "$d/batch_out"
  for f in task-"$2"-*-*.env; do
    base=${f%.env}
    base=${base#task-"$2"-}
    cp "$f" "$d/tasks/task_${base%-*}_${base#*-}"
  done
  scontrol show job -o "$2" >"$d/jobs" 2>/dev/null || true
  echo "$2" >"$d/job_id"
}
env_case het_env "$J_TX" torchx.sh
env_case het_env_sizes "$J_SZ" sizes.sh
# what each step printed (hostname; --error files), kept with the raw outputs
cp slurm-*.out slurm-*.err "$WORK/" 2>/dev/null || true

log "$rec_n outputs recorded; writing cases"
clear_cases
convert "$RAW" "$CASES" "$VERSION"
log "done"

#!/bin/bash
# Record what a real Slurm 22.05 prints, for gpuyard's byte-for-byte renderer tests.
#
# Usage (as root, Debian 12, packages from the recipe installed):
#     tests/data/slurm/record.sh [RECIPE_DIR]
#     KEEP=1 tests/data/slurm/record.sh          # keep the raw outputs in /tmp/gpuyard-slurm-record.*
#     tests/data/slurm/record.sh --convert /tmp/gpuyard-slurm-record.XXXX   # cases again, no Slurm
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

# raw outputs + facts -> cases/*.json (also alone: record.sh --convert RAWDIR, from a KEEP=1 run)
convert() {
"$PYTHON" - "$1" "$2" "$3" <<'PY'
import json, re, sys, calendar, time
from pathlib import Path

raw, out, version = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]


def ts(text):
    """Slurm's local time (UTC here) -> epoch seconds, None for Unknown/None/N/A."""
    if not text or text in ("Unknown", "None", "N/A", "(null)"):
        return None
    return float(calendar.timegm(time.strptime(text, "%Y-%m-%dT%H:%M:%S")))


def duration(text):
    """[D-]HH:MM:SS, MM:SS -> seconds; UNLIMITED/Partition_Limit -> None."""
    if not text or not text[0].isdigit():
        return None
    days = 0
    if "-" in text:
        d, text = text.split("-", 1)
        days = int(d)
    parts = [int(p) for p in text.split(":")]
    while len(parts) < 3:
        parts.insert(0, 0)
    return float(days * 86400 + parts[0] * 3600 + parts[1] * 60 + parts[2])


def expand(text):
    if not text or text in ("None assigned", "(null)", ""):
        return []
    names, depth, cur = [], 0, ""
    items = []
    for ch in text:
        if ch == "," and depth == 0:
            items.append(cur)
            cur = ""
            continue
        depth += ch == "["
        depth -= ch == "]"
        cur += ch
    items.append(cur)
    for item in items:
        m = re.fullmatch(r"([^\[]*)\[([^\]]*)\](.*)", item)
        if not m:
            names.append(item)
            continue
        pre, body, suf = m.groups()
        for part in body.split(","):
            lo, _, hi = part.partition("-")
            hi = hi or lo
            for n in range(int(lo), int(hi) + 1):
                names.append(f"{pre}{n:0{len(lo)}d}{suf}")
    return names


def exit_pair(text):
    if text == "":
        return -1, 0  # sacct prints nothing (Slurm's NO_VAL): a step killed before it ended
    code, _, sig = (text or "0:0").partition(":")
    return int(code or 0), int(sig or 0)


def split_o(line):
    """`scontrol show ... -o`: Key=Value pairs on one line (values may hold spaces)."""
    fields = {}
    for token in re.split(r" (?=[A-Za-z][A-Za-z0-9_:/]*=)", line.strip()):
        key, _, value = token.partition("=")
        fields[key] = value.strip()
    return fields


def job_from_scontrol(f):
    user, uid = re.fullmatch(r"(.*)\((\d+)\)", f["UserId"]).groups()
    group, gid = re.fullmatch(r"(.*)\((\d+)\)", f["GroupId"]).groups()
    code, sig = exit_pair(f.get("ExitCode"))
    array_job = f.get("ArrayJobId")
    task = f.get("ArrayTaskId")
    if task is not None and not task.isdigit():
        task = f"[{task}]"
    null = lambda v: "" if v in (None, "(null)") else v
    alloc_node, _, alloc_sid = f.get("AllocNode:Sid", ":0").partition(":")
    nodes_min, _, nodes_max = f["NumNodes"].partition("-")
    gpus = 0
    m = re.search(r"gpu:(\d+)", f.get("TresPerNode", ""))
    if m:
        gpus = int(m.group(1))
    mem = f.get("MinMemoryNode", "0")
    mem_mb = int(re.match(r"\d+", mem).group()) * (1024 if mem.endswith("G") else 1)
    return {
        "job_id": int(f["JobId"]),
        "name": f["JobName"],
        "user": user,
        "uid": int(uid),
        "state": f["JobState"],
        "partition": f["Partition"],
        "account": f.get("Account", "") if f.get("Account") != "(null)" else "",
        "group": group,
        "gid": int(gid),
        "array_job_id": int(array_job) if array_job else None,
        "array_task": task,
        "reason": f.get("Reason", "None"),
        "exit_code": code,
        "signal": sig,
        "nodes": expand(f.get("NodeList", "")),
        "num_nodes": int(f["NumNodes"].split("-")[0]),
        "num_cpus": int(f["NumCPUs"].split("-")[0]),
        "num_tasks": int(f.get("NumTasks", "1")),
        "cpus_per_task": int(f.get("CPUs/Task", "1")),
        "gpus_per_node": gpus,
        "memory_mb": mem_mb,
        "submit": ts(f["SubmitTime"]),
        "eligible": ts(f.get("EligibleTime")),
        "start": ts(f.get("StartTime")),
        "end": ts(f.get("EndTime")),
        "time_limit": duration(f.get("TimeLimit")),
        "priority": int(f.get("Priority", "0")),
        "qos": f.get("QOS", "normal"),
        "restarts": int(f.get("Restarts", "0")),
        "work_dir": f.get("WorkDir", ""),
        "command": null(f.get("Command", "")),
        "stdout": f.get("StdOut", ""),
        "stderr": f.get("StdErr", ""),
        "stdin": f.get("StdIn", "/dev/null"),
        "comment": null(f.get("Comment", "")),
        "requeue": f.get("Requeue", "1") == "1",
        "batch": f.get("BatchFlag", "1") == "1",
        "steps": [],
        "nice": int(f.get("Nice", "0")),
        "dependency": null(f.get("Dependency")),
        "exclusive": f.get("OverSubscribe") == "NO",
        "ntasks_per_node": int(f.get("NtasksPerN:B:S:C", "0").split(":")[0]),
        "min_cpus_per_node": int(f.get("MinCPUsNode", "1")),
        "max_nodes": int(nodes_max) if nodes_max else 0,
        "array_throttle": int(f.get("ArrayTaskThrottle", "0")),
        "accrue": ts(f.get("AccrueTime")),
        "last_sched_eval": ts(f.get("LastSchedEval")),
        "scheduler": f.get("Scheduler", ""),
        "alloc_node": alloc_node,
        "alloc_sid": int(alloc_sid or 0),
        "batch_host": f.get("BatchHost", ""),
        "tres": f.get("TRES", ""),
        "scontrol": f,
    }


def jobs_from_scontrol(path):
    text = path.read_text() if path.exists() else ""
    return [job_from_scontrol(split_o(line)) for line in text.splitlines() if line.strip()]


def display_id(job):
    if job["array_job_id"] is None or job["array_task"] is None:
        return str(job["job_id"])
    return f"{job['array_job_id']}_{job['array_task']}"


def jobs_from_sacct(path):
    """`sacct -P --format=ALL` with the same selection -> records with their steps, in order."""
    lines = path.read_text().splitlines() if path.exists() else []
    if not lines:
        return []
    head = lines[0].split("|")
    jobs = []
    for line in lines[1:]:
        parts = line.split("|")
        extra = len(parts) - len(head)
        if extra > 0 and "SubmitLine" in head:  # a salloc command line with pipes in it
            k = head.index("SubmitLine")
            parts = parts[:k] + ["|".join(parts[k:k + extra + 1])] + parts[k + extra + 1:]
        row = dict(zip(head, parts))
        code, sig = exit_pair(row["ExitCode"])
        state = row["State"]
        by = None
        m = re.fullmatch(r"CANCELLED by (\d+)", state)
        if m:
            state, by = "CANCELLED", int(m.group(1))
        if "." in row["JobID"]:
            step = row["JobID"].split(".", 1)[1]
            jobs[-1]["steps"].append({
                "name": step,
                "state": state,
                "nodes": expand(row["NodeList"]),
                "exit_code": code,
                "signal": sig,
                "start": ts(row["Start"]),
                "end": ts(row["End"]),
                "tasks": int(row["NTasks"] or 0),
                "cpus": int(row["AllocCPUS"] or 0),
                "job_name": row["JobName"],
            })
            continue
        array_job = task = None
        m = re.fullmatch(r"(\d+)_(.+)", row["JobID"])
        if m:
            array_job, task = int(m.group(1)), m.group(2)
        jobs.append({
            "job_id": int(row["JobIDRaw"]),
            "name": row["JobName"],
            "user": row["User"],
            "uid": int(row["UID"] or 0),
            "state": state,
            "partition": row["Partition"],
            "account": row["Account"],
            "group": row["Group"],
            "gid": int(row["GID"] or 0),
            "array_job_id": array_job,
            "array_task": task,
            "cancelled_by": by,
            "reason": row["Reason"],
            "exit_code": code,
            "signal": sig,
            "nodes": expand(row["NodeList"]),
            "num_nodes": int(row["NNodes"] or 0),
            "num_cpus": int(row["AllocCPUS"] or 0),
            "num_tasks": int(row["NTasks"] or 1),
            "submit": ts(row["Submit"]),
            "eligible": ts(row["Eligible"]),
            "start": ts(row["Start"]),
            "end": ts(row["End"]),
            "time_limit": duration(row["Timelimit"]),
            "priority": int(row["Priority"] or 0),
            "qos": row["QOS"],
            "work_dir": row["WorkDir"],
            "comment": row["Comment"],
            "steps": [],
            "sacct": row,
        })
    return jobs


def node_word(state):
    """scontrol's IDLE+DRAIN -> sinfo's long word (drained)."""
    base, *flags = state.lower().split("+")
    if "drain" in flags:
        return "draining" if base in ("allocated", "mixed") or "completing" in flags else "drained"
    if "completing" in flags:
        return "completing"
    return base


def nodes_from(path):
    nodes = []
    for line in path.read_text().splitlines():
        f = split_o(line)
        gres = re.search(r"gpu:(\d+)", f.get("Gres", ""))
        used = re.search(r"gpu:(?:\w+:)?(\d+)", f.get("GresUsed", ""))
        alloc_tres = re.search(r"gres/gpu=(\d+)", f.get("AllocTRES", ""))
        reason, reason_user, reason_time = f.get("Reason", ""), "", None
        m = re.fullmatch(r"(.*) \[(.*)@(.*)\]", reason)
        if m:
            reason, reason_user, reason_time = m.groups()
        nodes.append({
            "name": f["NodeName"],
            "partitions": f.get("Partitions", "").split(",") if f.get("Partitions") else [],
            "state": node_word(f["State"]),
            "cpus": int(f["CPUTot"]),
            "cpus_alloc": int(f.get("CPUAlloc", "0")),
            "memory_mb": int(f.get("RealMemory", "0")),
            "memory_alloc_mb": int(f.get("AllocMem", "0")),
            "gpus": int(gres.group(1)) if gres else 0,
            "gpus_alloc": int(alloc_tres.group(1)) if alloc_tres else (int(used.group(1)) if used else 0),
            "address": f.get("NodeAddr", ""),
            "features": [x for x in f.get("AvailableFeatures", "").split(",") if x and x != "(null)"],
            "reason": reason,
            "reason_user": reason_user,
            "reason_time": ts(reason_time),
            "boot_time": ts(f.get("BootTime")),
            "scontrol": f,
        })
    return nodes


def partitions_from(path):
    parts = []
    for line in path.read_text().splitlines():
        f = split_o(line)
        parts.append({
            "name": f["PartitionName"],
            "default": f.get("Default") == "YES",
            "state": f.get("State", "UP").lower(),
            "max_time": duration(f.get("MaxTime")),
            "nodes": expand(f.get("Nodes", "")),
            "scontrol": f,
        })
    return parts


def env_of(text):
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


count = 0
for case_dir in sorted(p for p in raw.iterdir() if p.is_dir()):
    name = case_dir.name
    case = {"name": name, "slurm_version": version, "tz": "UTC"}
    if name == "env_2x2":
        case.update(
            kind="env",
            job_id=int((case_dir / "job_id").read_text()),
            script=(case_dir / "script").read_text(),
            batch=env_of((case_dir / "batch_out").read_text()),
            tasks=[env_of((case_dir / f"task_{t}").read_text()) for t in range(4)],
            jobs=jobs_from_scontrol(case_dir / "jobs"),
        )
    else:
        kind = (case_dir / "kind").read_text().strip()
        case.update(
            kind=kind,
            argv=(case_dir / "argv").read_text().splitlines(),
            stdout=(case_dir / "stdout").read_text(),
            stderr=(case_dir / "stderr").read_text(),
            exit_code=int((case_dir / "rc").read_text()),
            now=float((case_dir / "now").read_text()),
        )
        if kind == "sacct":
            case["jobs"] = jobs_from_sacct(case_dir / "sacct_all")
        elif kind == "squeue" and "--json" in case["argv"]:
            # 22.05's --json ignores the selection and lists every job: the facts are the jobs
            # in the order the document lists them (by job_id, which is unique there)
            by_raw = {j["job_id"]: j for j in jobs_from_scontrol(case_dir / "jobs")}
            listed = [j["job_id"] for j in json.loads(case["stdout"])["jobs"]]
            case["jobs"] = [by_raw[i] for i in listed if i in by_raw]
        elif kind == "squeue":
            by_id = {display_id(j): j for j in jobs_from_scontrol(case_dir / "jobs")}
            ids = (case_dir / "ids").read_text().split() if (case_dir / "ids").exists() else []
            case["jobs"] = [by_id[i] for i in ids if i in by_id]
        elif kind == "salloc":
            # the fact: the id of the allocation (from "salloc: Granted job allocation N")
            m = re.search(r"Granted job allocation (\d+)", case["stderr"])
            case["job_id"] = int(m.group(1)) if m else None
        elif kind == "scontrol":
            # only the job asked for (none for hostnames/hostlist/requeue)
            argv = case["argv"]
            target = argv[3] if argv[1:3] == ["show", "job"] else None
            case["jobs"] = [
                j for j in jobs_from_scontrol(case_dir / "jobs")
                if target in (display_id(j), str(j["job_id"]))
            ]
        elif kind == "sbatch" and case["exit_code"] == 0:
            # the fact: the id Slurm gave the job
            case["job_id"] = int(re.search(r"(\d+)\s*$", case["stdout"]).group(1))
        elif kind == "sinfo":
            case["nodes"] = nodes_from(case_dir / "nodes")
            case["partitions"] = partitions_from(case_dir / "partitions")
    (out / f"{name}.json").write_text(json.dumps(case, indent=1, sort_keys=True) + "\n")
    count += 1
print(f"wrote {count} cases to {out}", file=sys.stderr)
PY

}
if [ "${1:-}" = --convert ]; then
  rm -f "$CASES"/*.json
  mkdir -p "$CASES"
  convert "$2/raw" "$CASES" "$(cat "$2/raw/sinfo_version/stdout")"
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

# sacct: the selection comes before "--", the format after; the facts are the same selection
# printed with every field
rec_sacct() {
  local name=$1 sel=() fmt=()
  shift
  while [ $# -gt 0 ] && [ "$1" != -- ]; do sel+=("$1"); shift; done
  [ $# -gt 0 ] && shift
  fmt=("$@")
  rec "$name" sacct sacct "${sel[@]}" "${fmt[@]}"
  sacct "${sel[@]}" -P --format=ALL >"$RAW/$name/sacct_all" 2>/dev/null || true
}
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
rec_scontrol() {
  local name=$1
  shift
  rec "$name" scontrol scontrol "$@"
  scontrol show job -o >"$RAW/$name/jobs" 2>/dev/null || true
}
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
rm -rf "$CASES"
mkdir -p "$CASES"
convert "$RAW" "$CASES" "$VERSION"
log "done"

"""Raw outputs of a real Slurm + the facts behind them -> tests/data/slurm/cases/*.json.

Usage: convert.py RAWDIR CASESDIR VERSION. record.sh runs it at the end of a recording (both
scenarios, default and het) and alone with `record.sh --convert WORKDIR`. One directory of RAWDIR
is one case; its name is the case's name.
"""

import calendar
import json
import re
import sys
import time
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


def het_of(f):
    """scontrol's HetJobId/HetJobOffset/HetJobIdSet (absent for a job that is not het: 0, 0, "")."""
    return int(f.get("HetJobId", "0")), int(f.get("HetJobOffset", "0")), f.get("HetJobIdSet", "")


def null(value):
    return "" if value in (None, "(null)") else value


def job_from_scontrol(f):
    user, uid = re.fullmatch(r"(.*)\((\d+)\)", f["UserId"]).groups()
    group, gid = re.fullmatch(r"(.*)\((\d+)\)", f["GroupId"]).groups()
    code, sig = exit_pair(f.get("ExitCode"))
    array_job = f.get("ArrayJobId")
    task = f.get("ArrayTaskId")
    if task is not None and not task.isdigit():
        task = f"[{task}]"
    alloc_node, _, alloc_sid = f.get("AllocNode:Sid", ":0").partition(":")
    _, _, nodes_max = f["NumNodes"].partition("-")
    gpus = 0
    m = re.search(r"gpu:(\d+)", f.get("TresPerNode", ""))
    if m:
        gpus = int(m.group(1))
    mem = f.get("MinMemoryNode", "0")
    mem_mb = int(re.match(r"\d+", mem).group()) * (1024 if mem.endswith("G") else 1)
    het_job_id, het_job_offset, het_job_id_set = het_of(f)
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
        "het_job_id": het_job_id,
        "het_job_offset": het_job_offset,
        "het_job_id_set": het_job_id_set,
        "scontrol": f,
    }


def jobs_from_scontrol(path):
    text = path.read_text() if path.exists() else ""
    return [job_from_scontrol(split_o(line)) for line in text.splitlines() if line.strip()]


def display_id(job):
    if job.get("het_job_id"):
        return f"{job['het_job_id']}+{job['het_job_offset']}"  # squeue %i, sacct JobID: 12+0
    if job["array_job_id"] is None or job["array_task"] is None:
        return str(job["job_id"])
    return f"{job['array_job_id']}_{job['array_task']}"


def het_fields(jobs, held):
    """het_job_id_set of sacct records: scontrol's while slurmctld holds the job, else the raw ids
    of its components as scontrol writes the set (12-13)."""
    for job in jobs:
        if job["job_id"] in held:
            job["het_job_id"], job["het_job_offset"], job["het_job_id_set"] = het_of(
                held[job["job_id"]]["scontrol"]
            )
        elif job["het_job_id"]:  # the components' raw ids, as scontrol writes the set: 12-13
            ids = sorted({j["job_id"] for j in jobs if j["het_job_id"] == job["het_job_id"]})
            runs = []
            for i in ids:
                if runs and i == runs[-1][1] + 1:
                    runs[-1][1] = i
                else:
                    runs.append([i, i])
            job["het_job_id_set"] = ",".join(f"{a}-{b}" if a != b else str(a) for a, b in runs)


def jobs_from_sacct(path, held=()):
    """`sacct -P --format=ALL` with the same selection -> records with their steps, in order.

    A step goes with the job its JobID names (`12+1.0` with `12+1`, `5_3.batch` with `5_3`).
    `held`: scontrol records of the jobs slurmctld still holds, for the het fields; a job it no
    longer holds gets them from its JobID (`12+1`: 12, 1) and its siblings' JobIDRaw.
    """
    lines = path.read_text().splitlines() if path.exists() else []
    if not lines:
        return []
    head = lines[0].split("|")
    jobs = []
    by_text = {}
    held = {j["job_id"]: j for j in held}
    for line in lines[1:]:
        parts = line.split("|")
        extra = len(parts) - len(head)
        if extra > 0 and "SubmitLine" in head:  # a salloc command line with pipes in it
            k = head.index("SubmitLine")
            parts = [*parts[:k], "|".join(parts[k : k + extra + 1]), *parts[k + extra + 1 :]]
        row = dict(zip(head, parts, strict=False))
        code, sig = exit_pair(row["ExitCode"])
        state = row["State"]
        by = None
        m = re.fullmatch(r"CANCELLED by (\d+)", state)
        if m:
            state, by = "CANCELLED", int(m.group(1))
        if "." in row["JobID"]:
            owner, step = row["JobID"].split(".", 1)
            by_text.get(owner, jobs[-1])["steps"].append(
                {
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
                    "sacct": row,
                }
            )
            continue
        array_job = task = None
        m = re.fullmatch(r"(\d+)_(.+)", row["JobID"])
        if m:
            array_job, task = int(m.group(1)), m.group(2)
        het_job_id = het_job_offset = 0
        m = re.fullmatch(r"(\d+)\+(\d+)", row["JobID"])
        if m:
            het_job_id, het_job_offset = int(m.group(1)), int(m.group(2))
        jobs.append(
            {
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
                "het_job_id": het_job_id,
                "het_job_offset": het_job_offset,
                "het_job_id_set": "",
                "sacct": row,
            }
        )
        by_text[row["JobID"]] = jobs[-1]
    het_fields(jobs, held)
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
        nodes.append(
            {
                "name": f["NodeName"],
                "partitions": f.get("Partitions", "").split(",") if f.get("Partitions") else [],
                "state": node_word(f["State"]),
                "cpus": int(f["CPUTot"]),
                "cpus_alloc": int(f.get("CPUAlloc", "0")),
                "memory_mb": int(f.get("RealMemory", "0")),
                "memory_alloc_mb": int(f.get("AllocMem", "0")),
                "gpus": int(gres.group(1)) if gres else 0,
                "gpus_alloc": int(alloc_tres.group(1))
                if alloc_tres
                else (int(used.group(1)) if used else 0),
                "address": f.get("NodeAddr", ""),
                "features": [
                    x for x in f.get("AvailableFeatures", "").split(",") if x and x != "(null)"
                ],
                "reason": reason,
                "reason_user": reason_user,
                "reason_time": ts(reason_time),
                "boot_time": ts(f.get("BootTime")),
                "scontrol": f,
            }
        )
    return nodes


def partitions_from(path):
    parts = []
    for line in path.read_text().splitlines():
        f = split_o(line)
        parts.append(
            {
                "name": f["PartitionName"],
                "default": f.get("Default") == "YES",
                "state": f.get("State", "UP").lower(),
                "max_time": duration(f.get("MaxTime")),
                "nodes": expand(f.get("Nodes", "")),
                "scontrol": f,
            }
        )
    return parts


def env_of(text):
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


count = 0
for case_dir in sorted(p for p in raw.iterdir() if p.is_dir()):
    name = case_dir.name
    case = {"name": name, "slurm_version": version, "tz": "UTC"}
    if name.startswith("het_env"):
        # a hetjob's environment: the batch shell's, and every task of a het step (all
        # components), in SLURM_PROCID order; task_component[i] is task i's component
        # (`task_<component>_<procid>` files); steps_out is the batch script's own stdout
        tasks = []
        for f in (case_dir / "tasks").iterdir():
            _, comp, procid = f.name.split("_")
            tasks.append((int(procid), int(comp), env_of(f.read_text())))
        tasks.sort()
        case.update(
            kind="env",
            job_id=int((case_dir / "job_id").read_text()),
            script=(case_dir / "script").read_text(),
            argv=(case_dir / "argv").read_text().splitlines(),
            batch=env_of((case_dir / "batch_env").read_text()),
            batch_stdout=(case_dir / "batch_out").read_text(),
            tasks=[env for _, _, env in tasks],
            task_component=[comp for _, comp, _ in tasks],
            jobs=jobs_from_scontrol(case_dir / "jobs"),
        )
    elif name == "env_2x2":
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
            case["jobs"] = jobs_from_sacct(
                case_dir / "sacct_all", jobs_from_scontrol(case_dir / "jobs")
            )
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
            # (`show job N` of a hetjob: every component, +0 first; `show job N+1`: that one)
            argv = [a for a in case["argv"] if a not in ("-o", "--oneliner")]
            target = argv[3] if argv[1:3] == ["show", "job"] and len(argv) > 3 else None
            case["jobs"] = [
                j
                for j in jobs_from_scontrol(case_dir / "jobs")
                if target in (display_id(j), str(j["job_id"]))
                or (j.get("het_job_id") and target == str(j["het_job_id"]))
            ]
        elif kind == "sbatch" and case["exit_code"] == 0:
            # the fact: the id Slurm gave the job (a hetjob's: its first component's)
            case["job_id"] = int(re.search(r"(\d+)\s*$", case["stdout"]).group(1))
            if (case_dir / "jobs").exists():
                case["jobs"] = [
                    j
                    for j in jobs_from_scontrol(case_dir / "jobs")
                    if case["job_id"] in (j["job_id"], j["het_job_id"])
                ]
        elif kind == "sinfo":
            case["nodes"] = nodes_from(case_dir / "nodes")
            case["partitions"] = partitions_from(case_dir / "partitions")
    (out / f"{name}.json").write_text(json.dumps(case, indent=1, sort_keys=True) + "\n")
    count += 1
print(f"wrote {count} cases to {out}", file=sys.stderr)

"""Loading traces and cluster files: presets, column mapping, gzip, openb rules, errors."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from gpuyard.errors import InvalidSpec
from gpuyard.simulator.cluster import CLUSTER_PRESETS, load_cluster
from gpuyard.simulator.study import load
from gpuyard.simulator.trace import PRESETS, load_trace, parse_mapping

VENUS = """job_id,user,vc,gpu_num,cpu_num,state,submit_time,duration
3,ua,vcA,8,1,COMPLETED,200,50
1,ub,vcB,16,4,FAILED,100,7
2,ua,vcA,1,1,CANCELLED,100,9
"""

OPENB = (
    (
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,"
        "creation_time,deletion_time,scheduled_time\n"
    )
    + """p0,1000,10,1,1000,,LS,Running,0,500,0
p1,1000,10,1,460,,BE,Succeeded,10,100,40
p2,1000,10,0,0,,LS,Running,20,300,20
p3,1000,10,1,500,,Burstable,Pending,30,900,
p4,1000,10,2,1000,,Guaranteed,Failed,40,90,45
"""
)


def write(path: Path, text: str, *, gz: bool = False) -> Path:
    if gz:
        path.write_bytes(gzip.compress(text.encode()))
    else:
        path.write_text(text)
    return path


def test_a_venus_trace_is_detected_sorted_and_read_gzipped(tmp_path: Path) -> None:
    path = write(tmp_path / "trace.csv.gz", VENUS, gz=True)
    jobs, report = load_trace(path)
    assert report.preset == "venus"
    # Sorted by submit time, ties in file order.
    assert [(j.job_id, j.cluster, j.group, j.gpus, j.duration) for j in jobs] == [
        ("1", "vcB", "vcB", 16, 7),
        ("2", "vcA", "vcA", 1, 9),
        ("3", "vcA", "vcA", 8, 50),
    ]
    assert (jobs[0].user, jobs[0].state) == ("ub", "FAILED")


def test_jobs_of_clusters_not_in_the_cluster_file_are_skipped_and_counted(
    tmp_path: Path,
) -> None:
    jobs, report = load_trace(write(tmp_path / "t.csv", VENUS), clusters=["vcA"])
    assert [j.job_id for j in jobs] == ["2", "3"]
    assert report.skipped == {"cluster not in the cluster file": 1}


def test_openb_rounds_fractions_up_and_skips_gpu_less_and_never_started_pods(
    tmp_path: Path,
) -> None:
    jobs, report = load_trace(write(tmp_path / "pods.csv", OPENB), clusters=["openb"])
    assert report.preset == "openb"
    assert [(j.job_id, j.gpus, j.submit, j.duration, j.cluster) for j in jobs] == [
        ("p0", 1, 0, 500, "openb"),
        ("p1", 1, 10, 60, "openb"),  # 460 milli-GPU -> 1 GPU; deletion - scheduled
        ("p4", 2, 40, 45, "openb"),
    ]
    assert report.rounded_up == 1
    assert report.skipped == {
        "no GPU requested": 1,
        "no run time known (never started in the original trace)": 1,
    }
    # QoS classes become tiers: Guaranteed > LS > Burstable > BE.
    assert [j.priority for j in jobs] == [2, 0, 3]


def test_a_column_mapping_loads_another_schema_without_code(tmp_path: Path) -> None:
    path = write(tmp_path / "other.csv", "id,who,t,g,secs\nx,alice,5,2.5,60\ny,bob,1,1,10\n")
    loaded_cluster = write(tmp_path / "nodes.csv", "gpus_per_node,num_nodes\n4,2\n")
    loaded = load(
        path,
        loaded_cluster,
        columns=parse_mapping(
            ["job_id=id", "user=who", "submit_time=t", "gpus=g", "duration=secs"]
        ),
    )
    assert [(j.job_id, j.user, j.gpus, j.duration, j.cluster) for j in loaded.jobs] == [
        ("y", "bob", 1, 10, "default"),
        ("x", "alice", 3, 60, "default"),
    ]
    assert loaded.report.rounded_up == 1


def test_a_yaml_mapping_file_maps_columns_and_priority_names(tmp_path: Path) -> None:
    trace = write(tmp_path / "t.csv", "id,t,g,d,prio\na,0,1,5,urgent\nb,0,1,5,\n")
    mapping = write(
        tmp_path / "map.yaml",
        "columns: {job_id: id, submit_time: t, gpus: g, duration: d, priority: prio}\n"
        "priorities: {urgent: highest}\n",
    )
    cluster = write(tmp_path / "c.csv", "gpus_per_node\n8\n")
    loaded = load(trace, cluster, map_file=mapping)
    assert [j.priority for j in loaded.jobs] == [3, 1]


def test_overriding_a_preset_column(tmp_path: Path) -> None:
    text = VENUS.replace("submit_time", "queued_at")
    path = write(tmp_path / "t.csv", text)
    schema = PRESETS["venus"].with_overrides(parse_mapping(["submit_time=queued_at", "state="]))
    jobs, _ = load_trace(path, schema)
    assert [(j.submit, j.state) for j in jobs] == [(100, None), (100, None), (200, None)]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("a,b\n1,2\n", "cannot tell the trace's schema"),
        (VENUS.replace("200,50", "soon,50"), r"line 2: submit_time is not a number: 'soon'"),
        (VENUS.replace("COMPLETED,200,50", "COMPLETED,,50"), "line 2: submit_time is empty"),
    ],
)
def test_bad_traces_say_what_is_wrong(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(InvalidSpec, match=message):
        load_trace(write(tmp_path / "t.csv", text))


def test_a_mapping_to_a_missing_column_names_it(tmp_path: Path) -> None:
    schema = PRESETS["venus"].with_overrides({"submit_time": "created"})
    with pytest.raises(InvalidSpec, match="no column for submit_time=created"):
        load_trace(write(tmp_path / "t.csv", VENUS), schema)


def test_a_bad_map_option_explains_the_syntax() -> None:
    with pytest.raises(InvalidSpec, match="CANONICAL=COLUMN"):
        parse_mapping(["submit=creation_time"])


def test_a_venus_vc_config_gives_one_partition_per_vc(tmp_path: Path) -> None:
    path = write(tmp_path / "vc.csv", "vc,num_nodes,gpus_per_node\nvcA,3,8\nvcB,1,8\n")
    partitions = load_cluster(path)
    assert [(p.name, len(p.nodes), p.gpus) for p in partitions] == [("vcA", 3, 24), ("vcB", 1, 8)]


def test_a_node_list_becomes_one_class_per_gpu_model(tmp_path: Path) -> None:
    text = (
        "sn,cpu_milli,memory_mib,gpu,model\n"
        "n0,1,1,8,G2\nn1,1,1,2,T4\nn2,1,1,8,G2\nn3,1,1,0,CPU\nn4,1,1,4,T4\n"
    )
    (partition,) = load_cluster(write(tmp_path / "nodes.csv", text), CLUSTER_PRESETS["openb"])
    assert partition.name == "openb"
    assert [(c.name, c.count, c.gpus) for c in partition.classes] == [
        ("G2", 2, 8),
        ("T4", 1, 2),
        ("T4", 1, 4),
    ]
    assert partition.gpus == 22


def test_a_cluster_file_without_gpus_per_node_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InvalidSpec, match="cannot tell the cluster file's schema"):
        load_cluster(write(tmp_path / "c.csv", "name,cores\nn0,64\n"))

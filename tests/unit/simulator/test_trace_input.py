"""Loading traces and cluster files: presets, column mapping, gzip, openb rules, errors."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from gpuyard.errors import InvalidSpec
from gpuyard.simulator.cluster import CLUSTER_PRESETS, NodeClass, Partition, load_cluster
from gpuyard.simulator.study import NEVER_FITS, load
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
        (
            VENUS.replace("200,50", "soon,50"),
            r"line 2, column 'submit_time': not a number: 'soon'",
        ),
        (VENUS.replace("COMPLETED,200,50", "COMPLETED,,50"), "line 2, column 'submit_time': empty"),
        (
            VENUS.replace("COMPLETED,200,50", "COMPLETED,200,inf"),
            "line 2, column 'duration': not a finite",
        ),
        (
            VENUS.replace("vcB,16,4", "vcB,nan,4"),
            "line 3, column 'gpu_num' \\(gpus\\): not a finite",
        ),
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


def test_one_mapped_column_keeps_the_detection_of_the_others(tmp_path: Path) -> None:
    # A Venus trace whose submit column has another name: the rest is still Venus.
    trace = write(tmp_path / "t.csv", VENUS.replace("submit_time", "queued_at"))
    cluster = write(tmp_path / "c.csv", "vc,num_nodes,gpus_per_node\nvcA,1,8\nvcB,2,8\n")
    loaded = load(trace, cluster, columns=parse_mapping(["submit_time=queued_at"]))
    assert loaded.report.preset == "venus + --map"
    assert [(j.job_id, j.user, j.cluster, j.gpus, j.submit, j.state) for j in loaded.jobs] == [
        ("1", "ub", "vcB", 16, 100, "FAILED"),
        ("2", "ua", "vcA", 1, 100, "CANCELLED"),
        ("3", "ua", "vcA", 8, 200, "COMPLETED"),
    ]


def test_a_mapping_over_canonical_columns_keeps_the_ones_it_does_not_name(
    tmp_path: Path,
) -> None:
    trace = write(tmp_path / "t.csv", "id,user,submit_time,gpus,duration,state\na,al,0,2,5,ok\n")
    cluster = write(tmp_path / "c.csv", "gpus_per_node\n8\n")
    loaded = load(trace, cluster, columns=parse_mapping(["job_id=id", "state="]))
    (job,) = loaded.jobs
    assert (job.job_id, job.user, job.gpus, job.duration, job.state) == ("a", "al", 2, 5, None)


def test_a_partial_mapping_file_merges_with_detection_and_map_options_go_over_it(
    tmp_path: Path,
) -> None:
    trace = write(tmp_path / "t.csv", VENUS.replace("submit_time", "queued_at"))
    cluster = write(tmp_path / "c.csv", "vc,num_nodes,gpus_per_node\nvcA,1,8\nvcB,2,8\n")
    mapping = write(tmp_path / "m.json", '{"columns": {"submit_time": "queued_at", "user": "vc"}}')
    loaded = load(trace, cluster, map_file=mapping, columns=parse_mapping(["user=user"]))
    assert loaded.report.preset == "venus + m.json + --map"
    assert [j.user for j in loaded.jobs] == ["ub", "ua", "ua"]


def test_skipped_rows_are_counted_with_example_lines(tmp_path: Path) -> None:
    rows = "".join(f"{i},u,vcA,1,1,COMPLETED,{i},-{i}\n" for i in range(5))
    trace = write(tmp_path / "t.csv", VENUS + rows + "9,u,vcA,0,1,COMPLETED,9,9\n")
    jobs, report = load_trace(trace)
    assert len(jobs) == 4  # the three of VENUS, and line 5's 0 s job (0 is not negative)
    # 4 negative rows: 3 examples, then "...".
    assert report.skipped == {"negative run time (duration < 0)": 4, "no GPU requested": 1}
    assert report.lines()[1:] == [
        "  skipped 4: negative run time (duration < 0); line 6 (-1 s), line 7 (-2 s), "
        "line 8 (-3 s), ...",
        "  skipped 1: no GPU requested; line 10",
    ]


def test_a_pod_that_ends_before_it_starts_is_skipped_naming_the_columns(tmp_path: Path) -> None:
    text = OPENB.replace(
        "p4,1000,10,2,1000,,Guaranteed,Failed,40,90,45", "p4,1,1,2,1000,,LS,F,40,30,45"
    )
    _, report = load_trace(write(tmp_path / "pods.csv", text), clusters=["openb"])
    assert report.examples["negative run time (deletion_time before scheduled_time)"] == [
        "line 6 (-15 s)"
    ]


def test_jobs_that_can_never_fit_their_cluster_are_left_out_and_reported(tmp_path: Path) -> None:
    trace = write(tmp_path / "t.csv", VENUS + "4,ua,vcA,24,1,COMPLETED,300,5\n")
    cluster = write(tmp_path / "c.csv", "vc,num_nodes,gpus_per_node\nvcA,2,8\nvcB,1,8\n")
    loaded = load(trace, cluster)
    assert [j.job_id for j in loaded.jobs] == ["2", "3"]
    assert loaded.report.jobs == 2
    assert loaded.report.skipped == {NEVER_FITS: 2}
    assert loaded.report.examples[NEVER_FITS] == [
        "line 3 (job 1: 16 GPUs; vcB has 8)",
        "line 5 (job 4: 24 GPUs; vcA has 16)",
    ]
    assert "  skipped 2: can never fit its cluster, not replayed; line 3" in "\n".join(
        loaded.report.lines()
    )


@pytest.mark.parametrize(
    ("classes", "gpus", "nodes", "fits"),
    [
        ([("a", 2, 8)], 16, None, True),
        ([("a", 2, 8)], 12, None, True),  # one whole node, 4 on the other
        ([("a", 1, 8), ("b", 1, 4)], 12, None, True),  # the remainder on the smaller node
        ([("a", 1, 8), ("b", 2, 2)], 12, None, False),  # 12 GPUs in all, no node takes 4
        ([("a", 1, 8), ("b", 2, 4)], 16, None, False),  # one 8-GPU node, not two
        ([("a", 1, 8), ("b", 2, 4)], 16, 4, False),  # 4 nodes of 4: only 3 have 4 or more
        ([("a", 2, 8), ("b", 2, 4)], 16, 4, True),
    ],
)
def test_a_partition_knows_which_jobs_can_never_start(
    classes: list[tuple[str, int, int]], gpus: int, nodes: int | None, fits: bool
) -> None:
    partition = Partition("p", tuple(NodeClass(*c) for c in classes))
    assert (partition.never_fits(gpus, nodes) is None) is fits


def test_a_trace_without_a_cluster_column_and_several_clusters_is_refused_at_once(
    tmp_path: Path,
) -> None:
    trace = write(tmp_path / "t.csv", "job_id,submit_time,gpus,duration\na,0,1,5\n")
    with pytest.raises(InvalidSpec, match=r"no cluster column and the cluster file has 2"):
        load_trace(trace, clusters=["x", "y"])


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ("a,0,1,5,0", r"line 2, column 'nodes': not a whole number of nodes"),
        ("a,0,1,5,1.5", r"line 2, column 'nodes': not a whole number of nodes"),
        ("a,0,1,5,x", r"line 2, column 'nodes': not a number: 'x'"),
    ],
)
def test_a_bad_node_count_is_an_error(tmp_path: Path, row: str, message: str) -> None:
    trace = write(tmp_path / "t.csv", f"job_id,submit_time,gpus,duration,nodes\n{row}\n")
    with pytest.raises(InvalidSpec, match=message):
        load_trace(trace, clusters=["c"])

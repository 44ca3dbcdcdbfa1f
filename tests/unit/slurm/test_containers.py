"""pyxis's container options on sbatch become the job's image fields (docs/slurm.md,
"Containers"), and what gpuyard cannot honour is refused with what to do instead."""

from __future__ import annotations

from typing import Any

import pytest

from gpuyard.models import JobSpec
from gpuyard.slurm.containers import image_reference
from gpuyard.slurm.options import OptionError, parse_sbatch
from gpuyard.slurm.sbatch import build_specs

CWD = "/home/alice/project"
ENVIRON = {"PATH": "/usr/bin:/bin", "HOME": "/home/alice", "WANDB_MODE": "offline"}


def build(args: list[str], script: str = "#!/bin/bash\necho hi\n") -> dict[str, Any]:
    options = parse_sbatch([*args, "job.sh"], script)
    (spec,) = build_specs(
        options,
        script,
        script_name="job.sh",
        cwd=CWD,
        environ=ENVIRON,
        pools=[],
        uid=1000,
        gid=1000,
    )
    JobSpec.model_validate(spec)
    return spec


@pytest.mark.parametrize(
    ("given", "reference"),
    [
        ("nvcr.io#nvidia/pytorch:24.01-py3", "nvcr.io/nvidia/pytorch:24.01-py3"),
        ("ubuntu:22.04", "ubuntu:22.04"),
        ("docker://registry.lab:5000#team/train:3", "registry.lab:5000/team/train:3"),
        ("team/train@sha256:" + "a" * 64, "team/train@sha256:" + "a" * 64),
    ],
)
def test_pyxis_image_names_become_registry_references(given: str, reference: str) -> None:
    assert image_reference(given) == reference


@pytest.mark.parametrize(
    ("given", "says"),
    [
        ("/shared/images/pytorch.sqsh", "gpuyard images push"),
        ("./pytorch.sqsh", "gpuyard images push"),
        ("alice@nvcr.io#nvidia/pytorch:24.01-py3", "no user"),
    ],
)
def test_image_files_and_credentials_in_the_name_are_refused(given: str, says: str) -> None:
    with pytest.raises(OptionError, match=says):
        image_reference(given)


def test_the_script_runs_in_the_image_with_its_mounts_and_working_directory() -> None:
    script = (
        "#!/bin/bash\n"
        # An unquoted '#' starts a comment on an #SBATCH line, as in Slurm: pyxis users escape it.
        "#SBATCH --container-image=nvcr.io\\#nvidia/pytorch:24.01-py3\n"
        "#SBATCH --container-mounts=/data:/data:ro,scratch:/scratch,/models\n"
        "#SBATCH --container-workdir=/workspace\n"
        "python train.py\n"
    )
    spec = build([], script)
    assert spec["image"] == "nvcr.io/nvidia/pytorch:24.01-py3"
    assert spec["container_mounts"] == [
        {"source": "/data", "target": "/data", "readonly": True},
        {"source": f"{CWD}/scratch", "target": "/scratch", "readonly": False},
        {"source": "/models", "target": "/models", "readonly": False},
    ]
    assert spec["workdir"] == "/workspace"
    # pyxis: the image's ENV wins over the forwarded environment, except the names given.
    assert spec["env_over_image"] == []
    assert build(["--container-image=a/b:1", "--container-env=PATH,WANDB_MODE"])[
        "env_over_image"
    ] == ["PATH", "WANDB_MODE"]


def test_a_job_without_container_options_has_no_image_fields() -> None:
    spec = build([])
    assert not {"image", "container_mounts", "env_over_image"} & set(spec)


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--container-mounts=/data:/data"], "needs --container-image"),
        (["--container-workdir=/w"], "needs --container-image"),
        (["--container-env=PATH"], "needs --container-image"),
        (["--container-image=a/b:1", "--container-mounts=/a:/b:ro:x"], "SRC"),
        (["--container-image=a/b:1", "--container-mounts=/a:/b:exec"], "mount flag"),
        (["--container-image=a/b:1", "--container-name=x"], "named containers"),
        (["--container-image=a/b:1", "--container-remap-root"], "never as root"),
        (["--container-image=a/b:1", "--container-save=/x.sqsh"], "images push"),
        (["--container-image=a/b:1", "--no-container-entrypoint"], "ENTRYPOINT"),
    ],
)
def test_what_cannot_be_honoured_is_refused_saying_why(args: list[str], says: str) -> None:
    with pytest.raises(OptionError, match=says):
        build(args)


def test_a_heterogeneous_job_runs_in_one_image() -> None:
    script = "#!/bin/bash\n#SBATCH --container-image=a/b:1\n#SBATCH hetjob\n#SBATCH -N1\necho\n"
    assert build([], script)["image"] == "a/b:1"
    other = "#!/bin/bash\n#SBATCH --container-image=a/b:1\n#SBATCH hetjob\n"
    other += "#SBATCH --container-image=c/d:2\necho\n"
    with pytest.raises(OptionError, match="one image"):
        build([], other)

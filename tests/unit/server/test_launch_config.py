"""The pool's settings become the launch inputs of every job (MPI installations, network,
whose OS account runs it)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from gpuyard.launch.network import Network, NetworkPreset
from gpuyard.launch.plan import MpiInstall
from gpuyard.models.job import MpiImplementation
from gpuyard.models.worker import RunAs
from gpuyard.settings import Settings
from gpuyard.up import launch_config, run_as


def test_settings_become_the_launch_config(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("GPUYARD_MPI_OPENMPI", str(tmp_path / "ompi"))
    monkeypatch.setenv("GPUYARD_MPI_MPICH", str(tmp_path / "mpich"))
    monkeypatch.setenv("GPUYARD_NETWORK", "roce")
    monkeypatch.setenv("GPUYARD_NETWORK_IFACE", "ib0")
    monkeypatch.setenv("GPUYARD_LARGE_SCALE_GPUS", "512")
    config = launch_config(Settings())
    assert config.mpi == {
        MpiImplementation.OPENMPI: MpiInstall(
            bin_dir=f"{tmp_path}/ompi/bin",
            lib_dir=f"{tmp_path}/ompi/lib",
            env={"MPI4PY_LIBMPI": f"{tmp_path}/ompi/lib"},
        ),
        MpiImplementation.MPICH: MpiInstall(
            bin_dir=f"{tmp_path}/mpich/bin",
            lib_dir=f"{tmp_path}/mpich/lib",
            env={"MPI4PY_LIBMPI": f"{tmp_path}/mpich/lib"},
        ),
    }
    assert config.network == NetworkPreset(Network.ROCE, interface="ib0", large_scale_gpus=512)


def test_the_defaults_find_the_mpis_that_make_setup_installs() -> None:
    # `make setup` puts Open MPI in this environment (the train extra) and MPICH beside it.
    settings = Settings()
    prefix = Path(sys.prefix)
    assert (settings.mpi_openmpi, settings.mpi_mpich) == (prefix, prefix / "mpich")
    assert (prefix / "bin" / "mpirun").exists() and (prefix / "mpich" / "bin" / "mpirun").exists()
    config = launch_config(settings)
    assert set(config.mpi) == {MpiImplementation.OPENMPI, MpiImplementation.MPICH}
    assert config.network == NetworkPreset()  # no preset unless the pool sets one


def test_a_bad_network_name_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUYARD_NETWORK", "ethernet")
    with pytest.raises(ValueError, match="roce"):
        Settings()


def test_jobs_run_as_their_owners_where_the_pool_can_switch_users(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert Settings().run_as is RunAs.OWNER  # the default
    assert run_as(Settings(), euid=0) == (RunAs.OWNER, "")
    assert launch_config(Settings(), euid=0).run_as is RunAs.OWNER
    # A pool not run by root cannot switch users: it runs jobs as itself, and says so.
    who, warning = run_as(Settings(), euid=1000)
    assert who is RunAs.POOL and launch_config(Settings(), euid=1000).run_as is RunAs.POOL
    assert "switching users needs a pool run by root" in warning
    assert "GPUYARD_RUN_AS=pool" in warning
    monkeypatch.setenv("GPUYARD_RUN_AS", "pool")  # meant: no warning
    assert run_as(Settings(), euid=1000) == (RunAs.POOL, "")
    assert launch_config(Settings(), euid=0).run_as is RunAs.POOL


def test_a_bad_run_as_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUYARD_RUN_AS", "root")
    with pytest.raises(ValueError, match="'owner' or 'pool'"):
        Settings()


@pytest.mark.parametrize(("users", "level"), [(0, "INFO"), (1, "INFO"), (2, "WARNING")])
def test_the_run_as_warning_is_one_only_where_several_users_share_the_account(
    caplog: pytest.LogCaptureFixture, users: int, level: str
) -> None:
    from gpuyard.executors.fake import FakeExecutor
    from gpuyard.up import _whose_jobs

    with caplog.at_level("INFO", logger="gpuyard.up"):
        who = _whose_jobs(Settings(), FakeExecutor(), users=users, euid=1000)
    assert who is RunAs.POOL  # a pool not run by root cannot switch users
    [record] = [r for r in caplog.records if "pool's own user" in r.getMessage()]
    assert record.levelname == level

"""The pool's settings become the launch inputs of every job (MPI installations, network)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from gpuyard.launch.network import Network, NetworkPreset
from gpuyard.launch.plan import MpiInstall
from gpuyard.models.job import MpiImplementation
from gpuyard.settings import Settings
from gpuyard.up import launch_config


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

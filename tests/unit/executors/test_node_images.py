"""What a worker in an image starts from (docs/images.md, "Launch modes in an image")."""

from __future__ import annotations

from gpuyard.executors.local import container
from gpuyard.executors.local.container import DEFAULT_PATH
from gpuyard.executors.local.node_images import LIBRARY_PACKAGE, image_env
from gpuyard.models.worker import IMAGE_LIBRARY


def test_the_pools_package_goes_first_on_the_images_pythonpath() -> None:
    assert image_env({"A": "1"}, ())["PYTHONPATH"] == IMAGE_LIBRARY
    found = image_env({"PYTHONPATH": "/opt/lib"}, ())
    assert found["PYTHONPATH"] == f"{IMAGE_LIBRARY}:/opt/lib"
    assert f"{IMAGE_LIBRARY}/gpuyard" == LIBRARY_PACKAGE


def test_gpuyards_directories_go_before_the_images_path_not_instead() -> None:
    assert image_env({"PATH": "/opt/bin:/bin"}, ("/job/bin",))["PATH"] == "/job/bin:/opt/bin:/bin"
    assert image_env({}, ("/job/bin",))["PATH"] == f"/job/bin:{DEFAULT_PATH}"
    assert "PATH" not in image_env({}, ())  # the supervisor's default then
    # The job's own PATH, when it sets one, replaces the whole (the supervisor's merge).
    env = container.environment(image_env({"PATH": "/bin"}, ("/job/bin",)), {"PATH": "/mine"})
    assert env["PATH"] == "/mine"

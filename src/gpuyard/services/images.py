"""Jobs' images at submission: each tag is resolved to its digest in the pool's registry and
the job keeps the pinned reference, so every node and every restart runs the same bytes
(docs/images.md, "Jobs in images"). An image the registry does not have is refused (422)
naming it, before anything is stored."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from gpuyard.errors import GpuyardError, InvalidSpec
from gpuyard.images.access import RegistryAccess
from gpuyard.images.errors import ImageNotFound, Unauthorized
from gpuyard.models.image import ImageRef
from gpuyard.models.job import JobSpec

__all__ = ["ImagePinner", "needs_registry"]


def needs_registry(specs: Sequence[JobSpec]) -> bool:
    """Whether submitting ``specs`` asks the registry (a network call: not on an event loop)."""
    return any(spec.image is not None for spec in specs)


MayUse = Callable[[str, ImageRef], bool]
"""Whether a user may run an image of the pool's registry (the catalogue's visibility rule:
:meth:`gpuyard.services.image_catalogue.ImageCatalogue.may_use`)."""


class ImagePinner:
    """Pins the images of submitted specs; ``access`` None: this pool has no registry."""

    def __init__(self, access: RegistryAccess | None, may_use: MayUse) -> None:
        self.access = access
        self.may_use = may_use

    def pinned(self, specs: Sequence[JobSpec], *, owner: str) -> list[JobSpec]:
        """``specs`` with each image pinned to its digest (specs without one unchanged); an
        image ``owner`` may not see is refused as one the registry lacks."""
        if not needs_registry(specs):
            return list(specs)
        digests: dict[str, str] = {}
        out = []
        for i, spec in enumerate(specs):
            if spec.image is None:
                out.append(spec)
                continue
            try:
                if spec.image not in digests:
                    digests[spec.image] = self._digest(ImageRef.parse(spec.image), owner)
            except GpuyardError as exc:
                if len(specs) == 1:
                    raise
                raise type(exc)(f"jobs[{i}]: {exc.detail}", extra=exc.extra) from None
            pinned = ImageRef.parse(spec.image).pinned(digests[spec.image])
            out.append(spec.model_copy(update={"image": str(pinned)}))
        return out

    def _digest(self, ref: ImageRef, owner: str) -> str:
        if self.access is None:
            raise InvalidSpec(
                f"this pool has no image registry, so a job cannot run in image {ref}: "
                "leave the image out, or ask an admin to set GPUYARD_REGISTRY"
            )
        self.access.check_own(ref)
        missing = InvalidSpec(f"image {ref} is not in the pool's registry: check its name and tag")
        try:
            with self.access.client() as client:
                digest = client.resolve(ref)
        except (ImageNotFound, Unauthorized):
            # The same answer for an image that is not there and one the pool may not read.
            raise missing from None
        # Asked after the registry, so that another user's private image is refused as a
        # missing one is, in words and in time (a registry round trip either way).
        if not self.may_use(owner, ref):
            raise missing
        return digest

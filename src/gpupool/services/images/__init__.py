"""Container images: pulled from a registry the site allows or imported from an archive,
kept once by manifest digest, listed and removed per team, and resolved for a job at submit.

``_images`` holds the service (pull, import, ls, show, rm); a job's image is resolved
at submit by ``services.jobs``; ``_fetch`` runs skopeo;
what the services need of the server beyond the core ports is in ``_ports``. The node side
(unpacking an image's tree, its config) is ``executors.images``.
"""

from __future__ import annotations

from gpupool.services.images._images import (
    image_layout,
    image_roots,
    list_images,
    pull,
    receive_archive,
    remove,
    show_image,
    usable_image,
)

__all__ = [
    "image_layout",
    "image_roots",
    "list_images",
    "pull",
    "receive_archive",
    "remove",
    "show_image",
    "usable_image",
]

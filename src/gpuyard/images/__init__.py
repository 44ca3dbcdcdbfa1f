"""Images on a node: the registry client, safe layer unpacking and the node image cache.

Depends on ``gpuyard.models`` (references, configs, manifests), the standard library and httpx
only (an import-linter contract in ``pyproject.toml``), so both the local executor and the Ray
node agents can use it. docs/images.md says what each part guarantees.
"""

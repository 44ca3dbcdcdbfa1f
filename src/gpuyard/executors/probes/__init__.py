"""Probes of a node's health, run by an executor where its nodes are (docs/node-health.md).

:mod:`.host` looks at the machine (the executor's heartbeat, disk space, the NIC); :mod:`.gpu`
at its GPUs through NVML, behind a seam that tests fill with a fake NVML. Each probe answers a
:class:`gpuyard.models.health.Finding`; one that breaks answers a warning saying so, and the
others go on.
"""

"""The ``gpuyard`` command line. Heavy modules are imported inside commands, not at start-up."""

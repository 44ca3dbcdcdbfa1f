"""gpuyard: an open-source AI compute pool."""

__version__ = "0.1.0"

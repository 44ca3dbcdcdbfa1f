"""The local executor: this machine, optionally split into virtual nodes."""

"""The Ray cluster executor: one node agent per Ray node runs the local executor's supervisors
(:mod:`.agent`); the control plane drives them (:mod:`.executor`); Ray nodes become gpuyard
nodes (:mod:`.nodes`). ``ray`` is imported lazily: this package imports without it."""

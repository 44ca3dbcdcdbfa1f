"""The controller: the reconcile loop that owns every side effect."""

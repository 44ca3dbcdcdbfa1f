"""Why a training job failed, from its workers' logs: pure functions over text (no I/O).

:mod:`gpuyard.diagnosis.signatures` holds the registry of log signatures and the rule that
picks a job's root cause across its ranks.
"""

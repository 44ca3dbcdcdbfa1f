"""Pure: job spec + placement -> per-worker argv, env and files, per distributed mode."""

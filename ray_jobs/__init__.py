"""The commands: `python -m ray_jobs.train` (one backend on Ray), `ray_jobs.compare` (the comparison), `ray_jobs.bench`
and `ray_jobs.fault_trials`, with the comparison's orchestrator, the tuning grid and the link sweep."""

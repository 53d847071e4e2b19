"""Ray entry points: `python -m ray_jobs.train` (one backend) and `python -m ray_jobs.compare` (the comparison)."""

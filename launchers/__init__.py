"""The launchers, in one place: Ray Train, RayExecutor, torchrun, horovodrun and the local references."""

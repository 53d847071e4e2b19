"""The one model of the averaging: each framework's schedule replayed from a measured backward, checked against the
waits measured here and published GPU runs, and predicting native ÷ Horovod on GPU clusters."""

"""The elastic and network experiments, apart from the comparison they extend: a simulated multi-node cluster with
shaped links, link sweeps and the fitted allreduce model that predicts past this machine, and nodes lost and
returned under each framework's elastic mode."""

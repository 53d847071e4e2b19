"""The cluster parts: joining Ray, routing its output, and the simulated multi-node cluster."""

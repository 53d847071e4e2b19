"""The shared workload under Horovod (horovodrun, or Horovod's Ray integration)."""

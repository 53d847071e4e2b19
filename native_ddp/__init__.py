"""The shared workload under PyTorch's own DistributedDataParallel (Ray Train's TorchTrainer, or torchrun)."""

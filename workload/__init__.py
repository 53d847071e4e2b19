"""The shared MNIST ConvNet workload: one model, one data path, one training step for every backend."""

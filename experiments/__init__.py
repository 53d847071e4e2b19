"""What extends the comparison, one package a question, each run without the core needing it: the comparison across a
shaped link between simulated nodes (simulated_cluster), training that loses a node and gets it back (elastic), and
the averaging on a GPU cluster this machine cannot build (gpu_model)."""

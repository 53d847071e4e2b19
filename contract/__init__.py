"""The torch-free contract every side imports: the config and the model registry, the options, the errors, the
results schema, the phases of a run and its summary."""

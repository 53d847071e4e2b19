"""The torch-free contract every side imports: config, options, errors, files, preflight checks, CLI, results schema, phases, summary."""

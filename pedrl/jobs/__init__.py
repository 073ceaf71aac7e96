"""What the entry points of pedrl.experiments run on: settings read from a config,
workdir records, the metrics writer, samples, sharding, config helpers, model and
problem loading, the reward factory, exit codes, and the bodies of the GRPO and
offline training jobs."""

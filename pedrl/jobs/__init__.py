"""What the jobs of pedrl.experiments run on: settings read from a config, workdir
records, the metrics writer, samples, sharding, config helpers, model and problem
loading, the reward factory, exit codes, the GRPO trainer built from a config
(shared with the learning benchmark) and the offline trainer SFT and MDPO share.
The jobs themselves (their flags, `main`, what they print) are pedrl.experiments'."""

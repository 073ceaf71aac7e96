"""Inference engine: generation with KV caches and log-prob scoring."""

"""pedrl: multi-turn reinforcement learning for LLM math tutors, in JAX/Flax."""

__version__ = "0.1.0"

"""pedrl: multi-turn reinforcement learning for LLM math tutors, in JAX/Flax."""
import os

# pedrl reads configs, tokenizers and chat templates with transformers, never its PyTorch
# models: its advice at import that PyTorch is missing is noise (set the variable to "" to
# see such advice).
os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")

__version__ = "0.1.0"

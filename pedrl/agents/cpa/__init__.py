"""CPA (paper 002): the metacognitive planning agent M1-M4."""

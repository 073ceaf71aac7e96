"""Evaluating tutors: the papers' protocols, metrics, benchmarks and transcript analysis."""

"""Evaluation: the papers' tutoring metrics, judges, Ped-RM, reasoning benchmarks,
MathTutorBench, and how evaluation records are sharded and merged."""

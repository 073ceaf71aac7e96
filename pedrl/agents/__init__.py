"""Agents over a backbone LLM (a local pedrl model or an endpoint): paper 002's CPA and
its prompting baselines, answering MathTutorBench tasks or tutoring in dialogues."""

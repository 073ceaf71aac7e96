"""Clients of services outside the process: the OpenAI-compatible endpoint client."""

"""An OpenAI-compatible server over pedrl's engine: `python -m pedrl.serve --model=DIR`."""

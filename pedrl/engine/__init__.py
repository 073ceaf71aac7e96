"""Inference engine: sampling with a KV cache that carries across turns, and scoring."""
from pedrl.engine.distribution import SamplingParams, token_logprobs
from pedrl.engine.sampling import Generation, Sampler, bucket, generate_greedy, sequence_keys
from pedrl.engine.scoring import Scorer, Scores, sequence_logprobs

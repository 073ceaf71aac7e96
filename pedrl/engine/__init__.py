"""Inference engine: sampling with a KV cache that carries across turns, and scoring."""
from pedrl.engine.distribution import RowSampling, SamplingParams, token_logprobs
from pedrl.engine.sampling import Generation, Sampler, generate_greedy
from pedrl.engine.scoring import Scorer, Scores, sequence_logprobs
from pedrl.engine.shapes import bucket
from pedrl.streams import sequence_keys

"""MathTutorBench's leaderboard number for the pedagogical tasks: the Ped-RM win rate.

For each bridge example, the reward model scores the generated teacher turn
("chosen") and the human teacher's turn ("rejected") in the same context:
its system prompt (the text the user points `system_prompt_file` at; pedrl
ships no copy), a user turn "Problem: …\\nReference Solution: …", the dialogue
so far (Teacher/Tutor turns as `assistant`, the rest `user`) and the reply as
the last `assistant` turn, through the reward model's chat template with no
generation prompt (the benchmark's compute_scaffolding_score). The results
carry the benchmark's names.
"""
from collections.abc import Sequence

import numpy as np
from numpy.typing import ArrayLike

from pedrl.eval import pedrm

TEACHER_ROLES = ("Teacher", "Tutor")


def chat(example: dict, reply: str, system_prompt: str) -> list[dict]:
  turns = [{"role": "assistant" if t["user"] in TEACHER_ROLES else "user", "content": t["text"]}
           for t in example["conversation_json"]]
  return (pedrm.mathtutorbench_opening(example["question"], example["reference_solution"],
                                      system_prompt)
          + turns + [{"role": "assistant", "content": reply}])


def pair_scores(rm: pedrm.PedRM, examples: Sequence[dict], replies: Sequence[str],
                system_prompt: str) -> tuple[list[float], list[float]]:
  """(Ped-RM score of each reply, of each example's human teacher turn), both in context."""
  chosen = rm.score([chat(x, r, system_prompt) for x, r in zip(examples, replies)])
  rejected = rm.score([chat(x, x["ground_truth_response"]["text"], system_prompt)
                       for x in examples])
  return [float(v) for v in chosen], [float(v) for v in rejected]


def win_rate(scores: ArrayLike, baselines: ArrayLike) -> dict[str, float]:
  """win_rate = share of examples where the generated turn outscores the human one;
  score / baseline_score their means; mean_margin the mean difference."""
  chosen, rejected = np.asarray(scores, float), np.asarray(baselines, float)
  return {"win_rate": float(np.mean(chosen > rejected)), "score": float(chosen.mean()),
          "baseline_score": float(rejected.mean()),
          "mean_margin": float(np.mean(chosen - rejected)), "total_samples": int(chosen.size)}


def context(example: dict) -> dict:
  """The example's fields of a generations-file row (all but the generated turn)."""
  return {"problem": example["question"], "reference_solution": example["reference_solution"],
          "dialog_history": example["conversation_json"],
          "dialog_formatted": example["dialog_history"],
          "ground_truth_response": example["ground_truth_response"]}

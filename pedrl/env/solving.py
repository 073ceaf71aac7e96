"""Student solve attempts: K samples before and after (paper 003 figure 11) a dialogue.

Each prompt is encoded once and its cache copied to its K samples. The last
`\\boxed{…}` of each sample is its answer; correctness is math-verify
equivalence with the reference, or the reference code's case-insensitive
string equality (`match="exact"`, to reproduce the paper's numbers).

After a dialogue the student gets its system prompt (figure 12, which carries
the problem, and the persona if any), then by default the visible dialogue as
chat turns in its own view (the tutor's messages `user`, its own `assistant`),
then figure 11 as a user message, as the reference code does. With
`post_format="transcript"` the dialogue instead fills figure 11's
`conversation` placeholder as "Teacher: …" / "Student: …" paragraphs in one
user message after the system prompt.
"""
from collections.abc import Sequence
import dataclasses

import numpy as np

from pedrl import streams
from pedrl.env import answers, prompts
from pedrl.env.dialogue import TUTOR, Dialogue, transcript
from pedrl.env.party import EndpointParty, Party
from pedrl.env.problems import Problem
# Re-exported: defined there, importable without JAX.
from pedrl.env.settings import POST_FORMATS, SolveSettings



@dataclasses.dataclass
class Attempts:
  texts: list
  answers: list  # Last boxed answer per sample, None without a box.
  correct: list

  @property
  def rate(self) -> float:
    return solve_rate(self.correct)


def solve_rate(correct: Sequence[bool]) -> float:
  """r_sol = (1/K) Σ_k 1[ŝ_k = s] (paper 003, eq. 2)."""
  return float(np.mean(np.asarray(correct, float))) if len(correct) else 0.0


def grade(texts: Sequence[str], reference: str, match: str = "math_verify") -> Attempts:
  found = [answers.extract(t, match) for t in texts]
  return Attempts(list(texts), found, [answers.is_correct(a, reference, match) for a in found])


def sample(student: Party | EndpointParty, chats: Sequence[list[dict]], uids: Sequence[int], k: int,
           seed: int, stream: int, prompts_per_call: int) -> list[list[str]]:
  """K sampled texts per chat ([{"role", "content"}] lists) by `student` (a pedrl.env.party.Party);
  sample j of chat i draws from key (seed, stream, uids[i], j). An endpoint student
  (pedrl.env.party.EndpointParty) gets K requests per chat, sampled by the endpoint."""
  if isinstance(student, EndpointParty):
    replies = student.replies([c for c in chats for _ in range(k)], "a solve attempt")
    return [[r.text for r in replies[i * k:(i + 1) * k]] for i in range(len(chats))]
  sampler, sp = student.sampler, student.sampling
  out = []
  for lo in range(0, len(chats), prompts_per_call):
    part = [student.chat.prompt_ids(c) for c in chats[lo:lo + prompts_per_call]]
    ids = uids[lo:lo + prompts_per_call]
    size = max(map(len, part)) + sp.max_new_tokens
    cache, last = sampler.prefill_shared(student.params, part, k, size)
    keys = streams.random_keys(seed, stream, np.repeat(ids, k), np.tile(np.arange(k), len(ids)))
    gen, _ = sampler.generate(student.params, last, keys, sp, cache)
    out += [gen.texts[i * k:(i + 1) * k] for i in range(len(part))]
  return out


def pre_dialogue_chat(problem: str, settings: SolveSettings) -> list[dict]:
  """The student alone on a problem: the pre-dialogue prompt (the user's file, else
  pedrl's) as a user message."""
  if settings.pre_prompt_file:
    text = prompts.render_file(settings.pre_prompt_file, "student_attempt_prompt.txt",
                               problem=problem)
  else:
    text = prompts.render(settings.pre_prompt, problem=problem)
  return [{"role": "user", "content": text}]


def post_dialogue_chat(d: Dialogue, settings: SolveSettings) -> list[dict]:
  """The student's system prompt (figure 12, with the persona), the dialogue and figure 11."""
  system = {"role": "system", "content": d.student_system_prompt()}
  if settings.post_format == "transcript":
    return [system, {"role": "user", "content": prompts.render(
        settings.post_prompt, conversation=transcript(d.messages))}]
  turns = [{"role": "user" if m.role == TUTOR else "assistant", "content": m.text}
           for m in d.messages]
  ask = prompts.render(settings.post_prompt, conversation="").strip()
  return [system, *turns, {"role": "user", "content": ask}]


def pre_dialogue(problems: Sequence[Problem], student: Party | EndpointParty,
                 settings: SolveSettings, *, seed: int) -> dict[str, Attempts]:
  """The student alone on each problem: {problem id: Attempts}; `seed` is the run's."""
  chats = [pre_dialogue_chat(p.problem, settings) for p in problems]
  uids = [streams.problem_number(p.id) for p in problems]  # The same draws in any batch.
  texts = sample(student, chats, uids, settings.k, seed, streams.PRE_SOLVE,
                 settings.prompts_per_call)
  return {p.id: grade(t, p.answer, settings.match) for p, t in zip(problems, texts)}


def post_dialogue(dialogues: Sequence[Dialogue], student: Party | EndpointParty,
                  settings: SolveSettings, *, seed: int) -> list[Attempts]:
  """Fills r_sol, post_answers and post_correct of each dialogue; returns their Attempts.
  `seed` is the run's (its dialogues')."""
  chats = [post_dialogue_chat(d, settings) for d in dialogues]
  texts = sample(student, chats, [d.uid for d in dialogues], settings.k, seed,
                 streams.POST_SOLVE, settings.prompts_per_call)
  out = []
  for d, t in zip(dialogues, texts):
    a = grade(t, d.answer, settings.match)
    d.post_answers, d.post_correct, d.r_sol = a.answers, a.correct, a.rate
    out.append(a)
  return out

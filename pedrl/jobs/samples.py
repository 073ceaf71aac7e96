"""Sample dialogues as text a researcher reads: WORKDIR/samples/step_NNNNNN.txt and TensorBoard.

Each dialogue opens with what explains its reward (the problem and reference
answer, the reward total with every component, its advantage, the judges'
verdicts, the student's solve attempts after it), then every message: the
tutor's thinking above its visible text, an empty visible text marked as such
(a tutor that only thought is not a blank line), a turn cut at its token limit
marked too.
"""
from collections.abc import Sequence

from pedrl.env import dialogue as dialogue_lib
from pedrl.rewards import assemble

EMPTY = "(nothing visible: the other side got an empty message)"


def _indent(text: str, prefix: str = "  ") -> str:
  return "\n".join(prefix + line for line in text.splitlines() or [""])


def _labelled(label: str, text: str) -> str:
  """`label` on the first line, the rest indented under it."""
  first, *rest = text.splitlines() or [""]
  return "\n".join([f"  {label}{first}", *("  " + " " * len(label) + line for line in rest)])


def _number(x) -> str:
  return "none" if x is None else f"{x:.3g}"


def rewards_line(d: dialogue_lib.Dialogue, advantage: float | None,
                 settings: assemble.RewardSettings) -> str:
  """Reward total = its terms (each component weighted, a weight other than 1 shown, and
  the hard variant's penalty), and the dialogue's advantage."""
  adv = "none (no tokens trained)" if advantage is None else f"{advantage:+.3f}"
  if d.rewards is None:
    return f"Reward: none{' (dropped by the judge failure policy)' if d.dropped else ''}" \
           f"; advantage {adv}"
  weights = dict(settings.weights)
  parts = [f"{k} {v:+.3f}" + (f" ({weights[k]:g} × {d.rewards.components[k]:+.3f})"
                              if weights.get(k, 1.0) != 1.0 else "")
           for k, v in assemble.terms(d.rewards.components, d, settings).items()]
  return f"Reward {d.rewards.total:+.3f} = {' '.join(parts)}; advantage {adv}"


def judges_line(v: dialogue_lib.Verdict | None) -> str:
  """Each judge's samples (OK / REJECT, or a score); * marks a value the on_failure policy
  filled in where no judge answered."""
  if v is None:
    return "Judges: not judged"
  judges = []
  for name, values in (*v.decisions.items(), *v.scores.items()):
    filled = v.filled.get(name, [False] * len(values))
    shown = [(("OK" if x else "REJECT") if isinstance(x, bool) else f"{x:.2f}") +
             ("*" if f else "") for x, f in zip(values, filled)]
    judges.append(f"{name} {' '.join(shown)}")
  out = "Judges: " + ("; ".join(judges) or "none answered")
  out += f" -> r_ped {_number(v.r_ped)}" + (f", r_think {_number(v.r_think)}"
                                            if v.r_think is not None else "")
  if any(f for fs in v.filled.values() for f in fs):
    out += " (* filled in by rewards.on_judge_failure: no judge answer)"
  for name, texts in v.reasons.items():
    for k, text in enumerate(texts):
      if text:
        out += "\n" + _labelled(f"{name} sample {k + 1}: ", text)
  return out


def solve_line(d: dialogue_lib.Dialogue) -> str:
  """The student's solve attempts after the dialogue: each answer, right or wrong."""
  before = (f"; before the dialogue {d.pre_solve_rate:.2f}"
            if d.pre_solve_rate is not None else "")
  if not d.post_answers:
    return f"Solve attempts after the dialogue: none{before}"
  shown = [f"{'(no boxed answer)' if a is None else a} {'right' if ok else 'wrong'}"
           for a, ok in zip(d.post_answers, d.post_correct)]
  return (f"Solve attempts after the dialogue: {', '.join(shown)} -> r_sol {_number(d.r_sol)}"
          f"{before}")


def _turn_reward(t) -> str:
  """A UCO turn reward (pedrl.rewards.uco_turns.TurnScore)."""
  flags = [f for f, on in (("oracle stand-in", t.oracle_fallback),
                           ("level from the nearest hint", t.level_fallback)) if on]
  return (f"UCO turn reward {t.reward:+.3f} = progress {t.progress:+.3f} + scaffold "
          f"{t.scaffold:+.3f} (level {t.level}, ZPD {t.zpd_level})"
          + (f" [{', '.join(flags)}]" if flags else ""))


def message_text(i: int, m: dialogue_lib.Message, show_thinking: bool,
                 turn_reward: dialogue_lib.TurnScore | None = None) -> str:
  """One message: a header (number, speaker, tokens, a cut), the tutor's thinking, the
  visible text."""
  cut = ", cut at max_new_tokens" if m.finish_reason == "length" else ""
  lines = [f"[{i + 1}] {dialogue_lib.SPEAKER_NAMES[m.role]} ({m.num_tokens} tokens{cut})"]
  if show_thinking and m.role == dialogue_lib.TUTOR:
    lines.append(_labelled("thinking: ", m.thinking or "(none)"))
  lines.append(_indent(m.text) if m.text.strip() else "  " + EMPTY)
  if turn_reward is not None:
    lines.append("  " + _turn_reward(turn_reward))
  return "\n".join(lines)


def describe(d: dialogue_lib.Dialogue, settings: assemble.RewardSettings,
             advantage: float | None = None) -> str:
  """One dialogue record (pedrl.env.dialogue.Dialogue), rewarded with `settings`, as
  readable text."""
  head = (f"## problem {d.problem_id}, rollout {d.rollout} (uid {d.uid}), {d.scenario}"
          + (f", step {d.step}" if d.step is not None else ""))
  lines = [head, "Problem: " + d.problem, "Reference answer: " + d.answer]
  if d.persona:
    lines.append("Student persona: " + d.persona)
  lines += [rewards_line(d, advantage, settings), judges_line(d.judgement), solve_line(d),
            f"Ended: {d.end_reason or '?'} after {d.turns} messages"
            + (" (dropped from the batch by the judge failure policy)" if d.dropped else "")]
  # Traces under each tutor turn when any has one (a turn without says so), else one line.
  thinking = any(m.thinking for m in d.messages if m.role == dialogue_lib.TUTOR)
  if not thinking:
    lines.append("Tutor thinking: none (no <think> block in any tutor turn)")
  by_message = {t.message: t for t in d.turn_rewards}
  messages = [message_text(i, m, thinking, by_message.get(i)) for i, m in enumerate(d.messages)]
  return "\n".join(lines) + "\n\n" + "\n\n".join(messages)


def step_text(step: int, dialogues: Sequence[dialogue_lib.Dialogue],
              advantages: Sequence[float | None], settings: assemble.RewardSettings) -> str:
  """A samples file: the step's sample dialogues, each with its advantage."""
  head = f"# step {step}: {len(dialogues)} sample dialogues, each of another problem"
  return "\n\n\n".join([head, *(describe(d, settings, a)
                                for d, a in zip(dialogues, advantages))]) + "\n"

"""An agent as the tutor of pedrl's dialogues (beyond paper 002, which evaluates single turns).

`AgentTutor` takes the tutor's side in `pedrl.env.rollout.run` the way an
endpoint does (`replies(conversations, what, turns)`): each turn, every live
dialogue's view (the tutor's system prompt and the messages so far) becomes one
instance of the "tutoring" contract, all of them one agent run. The rollout
names each view's dialogue and tutor turn (`pedrl.env.party.DialogueTurn`), and
the agent's draws and memory follow them, not the batch:

- an instance's uid, which seeds a local backbone's samples (with the run's seed and
  the instance's call number), is the dialogue's uid and the tutor turn together
  (`instance_uid`), so a dialogue's replies are the same alone, beside other
  dialogues, or in a resumed run, as a local tutor's are;
- CPA's memory M_t is kept under the dialogue's uid and read at its next tutor turn,
  so dialogues whose views are the same (one problem, temperature 0) keep their own.
  A rollout sends every live dialogue each turn, so a dialogue a call leaves out has
  ended: its memory is dropped, and a long evaluation holds only its live dialogues'.

`stats` counts what the agent did, for the job's counts (summed per shard as
`tutor_agent/…`): tutor turns, templates reused, each kind of fallback
(`fallbacks/<stage>`, the stand-ins a trace counts, never silent), and the backbone's
calls and tokens.

The agent sees the view and nothing else, not the problem's answer (no tutor
prompt of pedrl shows it): CPA's rule against stating the answer checks the
answer its own solve stage derived from the problem in the system prompt,
carried in M_t. The reply's token counts are not known per dialogue (the
backbone counts calls in aggregate): the rollout's token limit does not apply
to this side, as for an endpoint that reports no usage.
"""
import collections
from typing import Sequence

from pedrl.agents.cpa import agent as cpa
from pedrl.agents.cpa.state import Trace
from pedrl.env.party import Chat, DialogueTurn, Reply
# Re-exported: defined there, importable without JAX.
from pedrl.agents.settings import TutorAgentSettings

TASK = "tutoring"
TURNS = 1 << 10  # Tutor turns a dialogue may have: the uid's stride per dialogue.


def instance_uid(turn: DialogueTurn) -> int:
  """The agent instance's uid of a dialogue's tutor turn: one number per (dialogue, turn),
  within the 32 bits a random stream folds in (pedrl.streams.random_keys)."""
  uid = turn.uid * TURNS + turn.turn
  if not 0 <= turn.turn < TURNS or not 0 <= uid < 1 << 32:
    raise ValueError(f"dialogue {turn.uid}, tutor turn {turn.turn}: an agent tutor numbers "
                     f"at most {TURNS} turns of dialogues with uids below {(1 << 32) // TURNS}")
  return uid


def transcript(conversation: Sequence[dict]) -> str:
  """The tutor's view as the agent's task input: the system prompt, then the turns."""
  who = {"user": "Student", "assistant": "Tutor"}
  parts = [m["content"] if m["role"] == "system" else f"{who.get(m['role'], m['role'])}: "
           f"{m['content']}" for m in conversation]
  return "\n\n".join(parts)


class AgentTutor:
  """A tutor side played by an agent (CPA, an ablation or a baseline): a
  pedrl.env.party.Replier, as an endpoint is."""

  def __init__(self, agent, max_new_tokens: int = 0, keep_traces: bool = False) -> None:
    self.agent, self.max_new_tokens = agent, max_new_tokens
    # Live dialogue uid -> (the tutor turn that left it, M_t).
    self.memories: dict[int, tuple[int, cpa.Memory]] = {}
    # Every turn's trace, in order, when kept (a caller that reads them; a job does not).
    self.keep_traces = keep_traces
    self.traces: list[Trace] = []
    self._counted = collections.Counter()

  @property
  def client(self) -> "object | None":
    """The endpoint under the agent's backbone, if it runs on one (its calls, retries and
    errors are counted as an endpoint tutor's are); None on a local model."""
    return getattr(self.agent.backbone, "client", None)

  @property
  def stats(self) -> collections.Counter:
    """The agent's counts so far, with its backbone's (`backbone.Usage`)."""
    return self._counted + collections.Counter(getattr(self.agent.backbone, "stats", {}))

  def _memory(self, turn: DialogueTurn) -> cpa.Memory | None:
    """M_{t-1}: what the dialogue's previous tutor turn left; none at a first turn (a uid
    an earlier run's dialogue had starts afresh)."""
    left = self.memories.get(turn.uid)
    return left[1] if left is not None and left[0] == turn.turn - 1 else None

  def replies(self, conversations: Sequence[Chat], what: str,
              turns: Sequence[DialogueTurn] | None = None) -> list[Reply]:
    if turns is None or len(turns) != len(conversations):
      raise ValueError(f"an agent tutor answers {what} only given each conversation's "
                       "dialogue and turn (pedrl.env.rollout passes them)")
    instances = [cpa.Instance(instance_uid(k), TASK, transcript(conv), self._memory(k))
                 for conv, k in zip(conversations, turns)]
    traces = self.agent.run(instances)
    if self.keep_traces:
      self.traces += traces
    # The live dialogues' memories, for their next turn (CPA's; other agents keep none).
    self.memories = {k.uid: (k.turn, cpa.CPA.memory(t)) for k, t in zip(turns, traces)
                     if t.template is not None}
    self._counted["turns"] += len(traces)
    self._counted["reused_templates"] += sum(t.reused_template for t in traces)
    for t in traces:
      self._counted.update({f"fallbacks/{stage}": n for stage, n in t.fallbacks.items()})
    return [Reply(t.response, "stop") for t in traces]

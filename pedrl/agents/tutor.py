"""An agent as the tutor of pedrl's dialogues (beyond paper 002, which evaluates single turns).

`AgentTutor` takes the tutor's side in `pedrl.env.rollout.run` the way an
endpoint does (`replies(conversations, what)`): each turn, every live
dialogue's view (the tutor's system prompt and the messages so far) becomes one
instance of the "tutoring" contract, all of them one agent run. CPA's memory
M_t is carried from a dialogue's turn to its next: it is stored under the view
the reply completes and found again under the next view minus the student's
new message, so G rollouts of one problem keep their own memories once their
replies differ. The agent sees the view and nothing else, not the problem's
answer (no tutor prompt of pedrl shows it): CPA's rule against stating the
answer checks the answer its own solve stage derived from the problem in the
system prompt, carried in M_t. The reply's token counts are not known per
dialogue (the backbone counts calls in aggregate): the rollout's token limit
does not apply to this side, as for an endpoint that reports no usage.
"""
import hashlib
import json
from typing import Sequence

from pedrl.agents.cpa import agent as cpa
from pedrl.agents.cpa.state import Trace
from pedrl.env.party import Chat, Reply
# Re-exported: defined there, importable without JAX.
from pedrl.agents.settings import TutorAgentSettings

TASK = "tutoring"


def _key(messages) -> str:
  return hashlib.sha256(json.dumps(messages, sort_keys=True).encode()).hexdigest()


def transcript(conversation: Sequence[dict]) -> str:
  """The tutor's view as the agent's task input: the system prompt, then the turns."""
  who = {"user": "Student", "assistant": "Tutor"}
  parts = [m["content"] if m["role"] == "system" else f"{who.get(m['role'], m['role'])}: "
           f"{m['content']}" for m in conversation]
  return "\n\n".join(parts)


class AgentTutor:
  """A tutor side played by an agent (CPA, an ablation or a baseline): a
  pedrl.env.party.Replier, as an endpoint is."""

  def __init__(self, agent, max_new_tokens: int = 0) -> None:
    self.agent, self.max_new_tokens = agent, max_new_tokens
    self.memories: dict[str, cpa.Memory] = {}
    self.traces: list[Trace] = []  # Every turn's trace, in order (for a caller that keeps them).
    self._uid = 0

  def replies(self, conversations: Sequence[Chat], what: str) -> list[Reply]:
    del what
    instances = []
    for conv in conversations:
      memory = self.memories.get(_key(conv[:-1])) if len(conv) > 1 else None
      instances.append(cpa.Instance(self._uid, TASK, transcript(conv), memory))
      self._uid += 1
    traces = self.agent.run(instances)
    self.traces += traces
    out = []
    for conv, t in zip(conversations, traces):
      if t.template is not None:  # CPA's: its memory for the dialogue's next turn.
        self.memories[_key(conv + [{"role": "assistant", "content": t.response}])] = (
            cpa.CPA.memory(t))
      out.append(Reply(t.response, "stop"))
    return out

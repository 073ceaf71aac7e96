"""Asking a text backend until its replies parse: the judges, the UCO oracle and the
level classifier all go through `ask`.

A round sends every request still without an answer to the backend; a reply
that does not parse, or a request whose API retries ran out, is asked again
next round, up to `rounds` in all. What is still unanswered then goes back to
the caller, whose explicit policy fills it in (judges: accept, reject or drop;
oracle: the reference oracle or an error; classifier: the nearest hint). A
batch in which the policy would fill in more than `max_failed_share` of the
answers is an error: its values would be mostly stand-ins.
"""
import collections
import dataclasses
from typing import Callable, Protocol, Sequence, TypeVar

from pedrl.clients.openai_compat import failure_kind


class TextRequest(Protocol):
  """What every request to a text backend has (judging.Request, oracle.OracleRequest, …);
  a rule backend reads the fields of its own request type besides."""
  prompt: str
  uid: int  # Distinct within a batch: seeds a local model's sample.


class TextBackend(Protocol):
  """Where replies to prompts come from (pedrl.rewards.backends: an OpenAI-compatible
  endpoint, a local model, rules): per request its reply text, or the exception that
  ended its API retries (`ask` counts it and asks again next round)."""

  def complete(self, requests: Sequence[TextRequest],
               round_: int = 0) -> list[str | Exception]: ...


class AskStats(collections.Counter):
  """What asking cost and got, the same keys for every role (the reward pipeline
  writes them as judge/<key>, oracle/<key>, classifier/<key>):

    requests            distinct requests asked
    reasks              requests asked again, summed over the rounds after the first
    replies             texts that came back, parsed or not
    parse_failures      replies that did not parse
    api_errors          requests whose API retries ran out in a round
    api_errors/<kind>   the same by cause (`failure_kind`)
    policy/<name>       requests still unanswered after every round, which the caller's
                        failure policy <name> filled in (or dropped)
  """


def check_max_failed_share(share: float) -> None:
  if not 0.0 <= share <= 1.0:
    raise ValueError(f"max_failed_share {share} is not in [0, 1]")


def check_failed_share(failed: int, total: int, max_failed_share: float, what: str,
                       causes: collections.Counter, error: type) -> None:
  """Raises `error` when failed / total exceeds max_failed_share: the batch's values
  would be mostly stand-ins, not answers. `what` follows "<failed> of <total>"."""
  if not total or failed / total <= max_failed_share:
    return
  top = ", ".join(f"{k} {v}" for k, v in causes.most_common(3))
  raise error(f"{failed} of {total} {what} ({failed / total:.0%}), more than "
              f"rewards.max_failed_share={max_failed_share:g} allows; causes: {top}")


@dataclasses.dataclass
class Asked:
  """What `ask` got: per request its parsed answer (None: unanswered), per index of an
  unanswered request why its last round gave none (its AskStats key), and the indices of
  the requests that got a reply in some round (an API error in every round: none)."""
  answers: list
  causes: dict
  stats: AskStats
  replied: set = dataclasses.field(default_factory=set)

  @property
  def unanswered(self) -> list[int]:
    return sorted(self.causes)

  def to_policy(self, policy: str, max_failed_share: float, what: str, error: type) -> list[int]:
    """The unanswered requests' indices, for the caller's `policy` to fill in, counted as
    policy/<policy>. Checked first: `error` above max_failed_share of the requests."""
    check_failed_share(len(self.causes), len(self.answers), max_failed_share, what,
                       collections.Counter(self.causes.values()), error)
    if self.causes:
      self.stats[f"policy/{policy}"] += len(self.causes)
    return self.unanswered


PARSE_FAILURES = "parse_failures"  # An unanswered request's cause: its last reply did not parse.
R = TypeVar("R")  # A request.
A = TypeVar("A")  # Its parsed answer.


def ask(requests: Sequence[R],
        complete: Callable[[Sequence[R], int], Sequence[str | Exception]],
        parse: Callable[[R, str], A | None], rounds: int, stats: AskStats, *, who: str,
        error: type[Exception], down_is_error: bool = True) -> Asked:
  """Asks `complete(requests, round) -> [text | Exception]` until `parse(request, text)`
  gives a value (not None) for every request, for at most `rounds` rounds.

  `error` (naming the `who` backend) when the backend answers a different number of
  requests, and, with `down_is_error`, when the first round fails every request: the
  endpoint is down, not flaky, and re-asking or a policy would only hide it.
  """
  if rounds < 1:
    raise ValueError("rounds must be at least 1")
  answers, causes, replied = [None] * len(requests), {}, set()
  pending = list(range(len(requests)))
  if pending:
    stats["requests"] += len(pending)
  for round_ in range(rounds):
    if not pending:
      break
    if round_:
      stats["reasks"] += len(pending)
    replies = complete([requests[i] for i in pending], round_)
    if len(replies) != len(pending):
      raise error(f"the {who} backend returned {len(replies)} replies for {len(pending)} "
                  "requests")
    if round_ == 0 and down_is_error and all(isinstance(x, Exception) for x in replies):
      raise error(f"the {who} backend failed every request of the batch "
                  f"({type(replies[0]).__name__}: {replies[0]})")
    for i, reply in zip(pending, replies):
      if isinstance(reply, Exception):
        stats["api_errors"] += 1
        causes[i] = f"api_errors/{failure_kind(reply)}"
      else:
        stats["replies"] += 1
        replied.add(i)
        answers[i] = parse(requests[i], reply)
        causes[i] = PARSE_FAILURES
      if answers[i] is None:
        stats[causes[i]] += 1
      else:
        del causes[i]
    pending = [i for i in pending if answers[i] is None]
  return Asked(answers, causes, stats, replied)

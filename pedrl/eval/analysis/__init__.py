"""Paper 001's analysis of what tutors say and think, and the data views of papers 003 and 000.

  text          sentences, words, the response statistics (tables 3, 9; fig. 2)
  codebook      table 5's 82 codes (codebook.tsv)
  labelling     the LLM (or rule) labeller, its prompts, replies and cache
  significance  χ² tests with φ / Cramér's V (table 8), shares with intervals, Cohen's κ
  responses     tutor turns read from evaluation and rollout workdirs
  report        tables (Markdown, the paper's layouts) and figures (PNG)
  data_views    paper 003's table 1 and fig. 3, paper 000's fig. 3

The job is pedrl.experiments.analyze.
"""


class AnalysisError(ValueError):
  """An input the analysis cannot use (names the file, condition or setting)."""


def parse_named(text: str, sep: str, flag: str, value: str) -> dict:
  """{name: value text} of 'NAME=VALUE<sep>NAME=VALUE' (names may hold spaces and dots);
  AnalysisError naming --config.<flag> for an item that is no NAME=VALUE or a name
  given twice."""
  out = {}
  for item in (s.strip() for s in (text or "").split(sep)):
    if not item:
      continue
    name, eq, rest = (x.strip() for x in item.partition("="))
    if not eq or not name or not rest:
      raise AnalysisError(f"--config.{flag}: {item!r} is not NAME={value}")
    if name in out:
      raise AnalysisError(f"--config.{flag}: {name!r} is named twice")
    out[name] = rest
  return out

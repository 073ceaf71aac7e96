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

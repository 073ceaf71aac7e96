"""The benchmark's task names: what the constraint rules and an agent's contracts
need of MathTutorBench without its task files (pedrl.eval.mathtutorbench_harness.tasks)."""

# Task name -> (task file, data kind): the nine tasks of the leaderboard.
TASKS = {
    "problem_solving": ("problem_solving.yaml", "gsm8k"),
    "socratic_questioning": ("socratic_questioning.yaml", "gsm8k_socratic"),
    "solution_correctness": ("student_solution_correctness.yaml", "stepverify"),
    "mistake_location": ("mistake_location.yaml", "stepverify"),
    "mistake_correction": ("mistake_correction.yaml", "stepverify_errors"),
    "scaffolding_generation": ("scaffolding_generation.yaml", "bridge"),
    "pedagogy_following": ("pedagogy_following.yaml", "bridge"),
    "scaffolding_generation_hard": ("scaffolding_generation_hard.yaml", "bridge_hard"),
    "pedagogy_following_hard": ("pedagogy_following_hard.yaml", "bridge_hard"),
}
PEDAGOGICAL = ("scaffolding_generation", "pedagogy_following", "scaffolding_generation_hard",
               "pedagogy_following_hard")


class TaskError(ValueError):
  """A benchmark directory, task file or task name that cannot be used."""

"""Writes testdata/problems/bigmath_sample.jsonl: problems written here, in BigMath's schema,
and bigmath_published_sample.jsonl: those of them the published test split could hold.

Fields as on the Big-Math-RL-Verified dataset card: problem, answer, source,
domain (list of strings), llama8b_solve_rate (share of 64 Llama-3.1-8B samples
that were correct). The rates and a few non-numeric answers are chosen so the
paper's filter (single number, rate in [0.01, 0.60]) keeps some rows and drops
others. The published-split sample is in the format of the released test split
(rd211/Big-Math-RL-Verified-Filtered `test`: the same fields, rows that passed the
filter, rates 1/64 to 38/64, each problem once), for `problems.split=published`; its
rows are pedrl's. It leaves out the pool's first TINY_TRAINING rows, which the tiny
training jobs train on (problems.limit), so that evaluating a tiny run on it passes
the evaluation's check that no training problem is evaluated.
Deterministic: `python testdata/make_problems.py` rewrites the same files.
"""
import json
import os
import random

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "problems")
OUT = os.path.join(HERE, "bigmath_sample.jsonl")
PUBLISHED = os.path.join(HERE, "bigmath_published_sample.jsonl")
TINY_TRAINING = 8  # Pool rows the tiny jobs train on (baselines.py:tiny takes the most, 8).
WORD = "Mathematics -> Applied Mathematics -> Math Word Problems"
ALGEBRA = "Mathematics -> Algebra -> Prealgebra -> Fractions"


def word_problems(rng):
  names = ["Ana", "Ben", "Chen", "Dara", "Eli", "Fatima", "Gus", "Hana"]
  for i in range(16):
    a, b, c = rng.randint(3, 40), rng.randint(2, 9), rng.randint(1, 20)
    name = names[i % len(names)]
    if i % 3 == 0:
      text = (f"{name} buys {b} boxes of pencils with {a} pencils in each box and gives away "
              f"{c} pencils. How many pencils does {name} have left?")
      answer = str(a * b - c)
    elif i % 3 == 1:
      text = (f"A tank holds {a * b} litres of water. {name} pours it equally into {b} buckets. "
              f"How many litres are in each bucket?")
      answer = str(a)
    else:
      text = (f"{name} reads {a} pages on Monday and {b} times as many pages on Tuesday. "
              f"How many pages does {name} read on the two days together?")
      answer = str(a + a * b)
    yield text, answer, "orca_math", WORD


def fraction_problems(rng):
  for _ in range(6):
    p, q = rng.randint(1, 5), rng.randint(6, 9)
    yield (f"What is $\\frac{{{p}}}{{{q}}} + \\frac{{{p}}}{{{q}}}$ in lowest terms?",
           f"\\frac{{{2 * p}}}{{{q}}}" if (2 * p) % q else str(2 * p // q), "cn_k12", ALGEBRA)


def non_numeric():  # Kept by the loader, dropped by the paper's single-number filter.
  yield ("Find all real $x$ with $x^2 = 9$.", "\\{-3, 3\\}", "olympiads", ALGEBRA)
  yield ("Write the point that is 2 units right of and 5 units above the origin.", "(2, 5)",
         "cn_k12", ALGEBRA)
  yield ("Simplify $3(x + 2) - 6$.", "3x", "MATH", ALGEBRA)


def main():
  rng = random.Random(2024)
  rows = []
  for text, answer, source, domain in [*word_problems(rng), *fraction_problems(rng), *non_numeric()]:
    rate = rng.choice([0.0, 1 / 64, 5 / 64, 12 / 64, 20 / 64, 38 / 64, 45 / 64, 1.0])
    rows.append({"problem": text, "answer": answer, "source": source, "domain": [domain],
                 "llama8b_solve_rate": rate})
  n_numeric = len(rows) - 3  # The last three rows are non_numeric()'s.
  published, seen = [], set()
  for r in rows[TINY_TRAINING:n_numeric]:
    if 1 / 64 <= r["llama8b_solve_rate"] <= 38 / 64 and r["problem"] not in seen:
      published.append(r)
      seen.add(r["problem"])
  os.makedirs(HERE, exist_ok=True)
  for path, out in ((OUT, rows), (PUBLISHED, published)):
    with open(path, "w") as f:
      for row in out:
        f.write(json.dumps(row) + "\n")
    print(f"wrote {len(out)} rows to {path}")


if __name__ == "__main__":
  main()

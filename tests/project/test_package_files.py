"""The license and citation files a clone and a wheel's sdist carry."""
import os
import re

import yaml

from tests.helpers import jobs


def _read(name: str) -> str:
  with open(os.path.join(jobs.ROOT, name), encoding="utf-8") as f:
    return f.read()


def test_the_license_is_apache_2_as_setup_py_declares():
  assert re.match(r"\s*Apache License\s+Version 2\.0, January 2004", _read("LICENSE"))
  assert 'license="Apache-2.0"' in _read("setup.py")


def test_citation_cites_pedrl_and_the_four_papers():
  c = yaml.safe_load(_read("CITATION.cff"))
  assert c["cff-version"] == "1.2.0" and c["license"] == "Apache-2.0"
  assert c["title"].startswith("pedrl") and c["authors"] and c["message"]
  titles = [" ".join(r["title"].split()) for r in c["references"]]
  assert [t.split(":")[0] for t in titles] == [
      "From Problem-Solving to Teaching Problem-Solving", "Rewarding How Models Think "
      "Pedagogically", "UCO", "Metacognition-Driven Cognitive Planning for Pedagogical Dialogue"]
  assert all(r["authors"] and r["type"] for r in c["references"])

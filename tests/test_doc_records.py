"""The benchmark records the docs cite are in the repository: a figure whose record a
fresh clone lacks cannot be checked (three were cited but ignored by git: found
2026-12-04)."""

from __future__ import annotations

import fnmatch
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CITED = re.compile(r"bench/results/([A-Za-z0-9_.-]+\.json)")


def ignored(path: str) -> bool:
    """What the repository's .gitignore says of `path` (relative, with /), read as git
    reads it: the last rule that matches decides; a rule with a slash inside is anchored at
    the root, one without matches any component."""
    verdict = False
    for raw in (REPO / ".gitignore").read_text().splitlines():
        rule = raw.strip()
        if not rule or rule.startswith("#"):
            continue
        negate = rule.startswith("!")
        pattern = rule[1:] if negate else rule
        pattern = pattern.rstrip("/")
        if "/" in pattern:
            pattern = pattern.lstrip("/")
            hit = fnmatch.fnmatch(path, pattern) or path.startswith(pattern + "/")
        else:
            hit = any(fnmatch.fnmatch(part, pattern) for part in path.split("/"))
        if hit:
            verdict = not negate
    return verdict


def test_every_record_the_docs_cite_is_in_the_repository():
    docs = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    cited = {(m.group(1), doc.name) for doc in docs for m in CITED.finditer(doc.read_text())}
    assert len(cited) >= 5, cited  # the pattern finds the citations
    missing = sorted(f"{doc} cites bench/results/{name}" for name, doc in cited
                     if not (REPO / "bench" / "results" / name).is_file()
                     or ignored(f"bench/results/{name}"))
    assert not missing, ("records cited but not in the repository (run the bench, then "
                         "add the record and an exception in .gitignore):\n"
                         + "\n".join(missing))


def test_the_ignore_rules_are_read_as_git_reads_them():
    assert ignored("bench/results/pipeline.json")  # /bench/results/*
    assert not ignored("bench/results/churn.json")  # !/bench/results/churn.json
    assert ignored("bench/__pycache__/common.cpython-311.pyc")  # __pycache__/ anywhere
    assert ignored("tests/reliability/soak.json")
    assert not ignored("tests/reliability/test_soak.py")

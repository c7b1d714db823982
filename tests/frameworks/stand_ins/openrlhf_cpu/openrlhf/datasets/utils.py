"""FAKE openrlhf.datasets.utils.blending_datasets (0.11.2). The dataset's name says what
it holds: ``openrlhf-fake://<source>?prompts=N&slow=a-b`` (prompts a..b, 0-based, are
labelled ``slow``: the run's reward function takes its time over them)."""

from urllib.parse import parse_qs, urlsplit


class Rows(list):
    def select(self, indices):
        return Rows(self[i] for i in indices)


def blending_datasets(datasets, probabilities=None, strategy=None, seed=42, max_count=10**9,
                      dataset_split="train", **_):
    url = urlsplit(str(datasets).split(",")[0])
    q = {k: v[0] for k, v in parse_qs(url.query).items()}
    slow = range(0)
    if q.get("slow"):
        lo, _, hi = q["slow"].partition("-")
        slow = range(int(lo), int(hi or lo) + 1)
    return Rows({"datasource": url.netloc, "prompt": f"{url.netloc} prompt {i}",
                 "label": "slow" if i in slow else "ok"}
                for i in range(min(int(q.get("prompts", 8)), max_count)))

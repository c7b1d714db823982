"""FAKE openrlhf.datasets.PromptDataset (0.11.2): items (datasource, prompt, label,
images) and its collate_fn, as the samples generator unpacks a batch."""


class PromptDataset:
    def __init__(self, dataset, tokenizer, strategy, input_template=None):
        self.rows = list(dataset)

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, i):
        row = self.rows[i]
        return row["datasource"], row["prompt"], row["label"], None

    def collate_fn(self, items):
        return tuple(list(col) for col in zip(*items, strict=True))

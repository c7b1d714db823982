"""FAKE openrlhf.utils.deepspeed.DeepspeedStrategy (0.11.2): what the trainers call on it
(args, print, setup_dataloader, is_rank_0), no DeepSpeed."""


class FakeLoader:
    """A dataloader over a list of batches: len, iteration, its state."""

    def __init__(self, batches):
        self.batches = list(batches)

    def __len__(self):
        return len(self.batches)

    def __iter__(self):
        return iter(self.batches)

    def state_dict(self):
        return {}

    def load_state_dict(self, state):
        pass


class DeepspeedStrategy:
    def __init__(self, seed=42, args=None, **_):
        self.seed, self.args = seed, args

    def print(self, *msg):
        print(*msg)

    def is_rank_0(self):
        return True

    def setup_dataloader(self, dataset, batch_size, pin_memory=False, shuffle=True,
                         collate_fn=None, drop_last=True, num_workers=0, **_):
        items = [dataset[i] for i in range(len(dataset))]
        return FakeLoader(collate_fn(items[i:i + batch_size])
                          for i in range(0, len(items), batch_size))

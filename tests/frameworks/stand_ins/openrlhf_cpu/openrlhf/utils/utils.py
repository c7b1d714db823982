"""FAKE openrlhf.utils.utils (0.11.2): get_strategy, get_tokenizer (a character tokenizer
standing for a model's), zero_pad_sequences (the shape OpenRLHF's has)."""
import torch
import torch.nn.functional as F


class FakeTokenizer:
    """What OpenRLHF calls on a Hugging Face tokenizer: ``__call__(text=...,
    return_tensors="pt")["input_ids"]``, ``decode``, the special token ids."""

    eos_token_id = 2
    pad_token_id = 0

    def __call__(self, text, add_special_tokens=False, return_tensors=None, **_):
        ids = [3 + (ord(c) % 200) for c in str(text)]
        return {"input_ids": torch.tensor([ids]) if return_tensors == "pt" else [ids]}

    def decode(self, ids, skip_special_tokens=True, **_):
        flat = torch.as_tensor(ids).flatten().tolist()
        return "".join(chr(97 + (int(i) % 26)) for i in flat if int(i) > 2)


def get_tokenizer(pretrain, model, padding_side="left", strategy=None, use_fast=True):
    return FakeTokenizer()


def get_strategy(args):
    from openrlhf.utils.deepspeed import DeepspeedStrategy

    return DeepspeedStrategy(seed=getattr(args.train, "seed", 42), args=args)


def zero_pad_sequences(sequences, side="left", value=0, stack=False):
    longest = max(seq.size(-1) for seq in sequences)
    padded = [F.pad(seq, (longest - seq.size(-1), 0) if side == "left"
                    else (0, longest - seq.size(-1)), value=value) for seq in sequences]
    return torch.stack(padded, dim=0) if stack else torch.cat(padded, dim=0)

"""FAKE vllm.inputs.TokensPrompt (a TypedDict in vLLM: a dict here)."""


def TokensPrompt(prompt_token_ids=None, **kwargs):  # noqa: N802
    return {"prompt_token_ids": list(prompt_token_ids or []), **kwargs}

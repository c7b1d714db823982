"""A folder to put on ``PYTHONPATH``: its ``sitecustomize`` sets the frameworks' import
patches (their tables' ``on_import``) in every Python process started with it, as the
Ray worker setup hook does inside Ray, for frameworks that run their own processes
(prime-rl's launcher, torchrun). ``python -m rl_insight.integrations.prime_rl ...`` puts it
there; nothing here is imported as this package."""

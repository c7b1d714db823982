"""FAKE slime (THUDM/slime 624b824a): the modules rl_insight.integrations.slime touches."""

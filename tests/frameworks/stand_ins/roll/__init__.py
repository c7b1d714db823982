"""FAKE ROLL (alibaba/ROLL 8eb27cc2): the modules rl_insight.integrations.roll touches."""

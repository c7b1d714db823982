"""Grafana, as the CLI reaches one: its HTTP API (api.py), the dashboards' datasources
mapped to a Grafana's own (mapping.py), and `rl-insight dashboards install|export`
(install.py). The server's managed Grafana is a service of its own
(rl_insight/server/services/grafana.py)."""

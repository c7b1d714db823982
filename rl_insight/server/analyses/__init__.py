"""What the server makes of what it holds: step anatomy, alerts (the rules it writes for
Prometheus and the report of what fires), the status page and its own metrics."""

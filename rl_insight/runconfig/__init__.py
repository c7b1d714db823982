"""A run's configuration, as plain data both sides read: flattened to dotted keys with
JSON-safe values, secrets masked and bounded before it leaves the training process
(flatten.py, secrets.py), two runs' told apart (diff.py), the names it crosses to the
server with (wire.py). Imports nothing of the client, the server, Ray or a framework."""

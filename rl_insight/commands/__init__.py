"""The CLI's commands that have grown beyond a few lines, one module each (cli.py parses
and dispatches)."""

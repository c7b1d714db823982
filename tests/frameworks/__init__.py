"""Driver scripts that run another RL framework's own trainer in a process of its own
(each framework's packages on its PYTHONPATH, never imported by pytest itself)."""

"""A folder put on PYTHONPATH for child processes (its sitecustomize.py); see compat.child_processes."""

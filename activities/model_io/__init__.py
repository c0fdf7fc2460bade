"""What a model is shown and what it answers: a task's prompt, a repository's files read from a
commit, and the model's edits applied to a worktree.

Imports nothing from the other activity groups (it reads the worker-memory `services`).
"""

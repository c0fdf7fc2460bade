"""What a model is shown and what it answers: a task's prompt, a repository's files read from a
commit, the model's edits applied to a worktree; it imports no activity group but `services`."""

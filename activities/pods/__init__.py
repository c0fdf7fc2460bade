"""What workers on many pods share and how they stay out of each other's way: lease locks and their
fences, each worker's presence, one clone's worktree registrations and git lock files, and
whether anyone serves the task queue a call waits on. Imports nothing from the other activity
groups."""

"""Where a task's work lives and how it reaches git: the worktree pool and its slots (refs, watch,
commit), scratch folders for tasks without a worktree, git from the event loop, applying a batch's
ops, branch claims, and the merge queue's side (a task's entry, the queue's merge chain).

Uses `processes` (git is a child process like any other) and `pods` (a slot is registered in a
clone other pods share); neither of them uses this package.
"""

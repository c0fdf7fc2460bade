"""Where a task's work lives and how it reaches git: the worktree pool and its slots, scratch
folders, git from the event loop, applying a batch's ops, branch claims, the merge queue's side.
Uses `processes` (git is a child process like any other) and `pods` (slots live in clones other
pods share); neither uses this package."""

"""The Claude implementer: its batcher, a task as a child workflow, every role's model calls."""

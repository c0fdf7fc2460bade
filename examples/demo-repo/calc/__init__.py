"""A tiny calculator, grown one operation per task by the demo board."""

"""Every process a task starts: the executor, the rules it starts under (environment, process tree),
the on-disk records that let a later worker kill what a dead one left, and the orphan watchdog.
Imports nothing from the other activity groups: everything else that starts a process uses this."""

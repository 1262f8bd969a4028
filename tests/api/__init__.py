"""ember's public API as data: a snapshot per release, and the code that takes one."""

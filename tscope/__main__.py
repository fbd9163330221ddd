"""`python -m tscope` runs the same CLI as the `tscope` command (the hostile-input tests use it)."""

from tscope.cli import main

main()

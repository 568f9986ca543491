"""`python -m testkit.slurmlab`: see testkit.slurmlab.cli."""

from testkit.slurmlab.cli import main

raise SystemExit(main())

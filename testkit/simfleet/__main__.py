"""`python -m testkit.simfleet --nodes N ...` (see testkit.simfleet.cli)."""

from testkit.simfleet.cli import main

raise SystemExit(main())

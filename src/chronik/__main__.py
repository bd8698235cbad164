"""`python -m chronik` runs the command line."""

from chronik.cli.main import main

raise SystemExit(main())

from neurontrace.cli import main

raise SystemExit(main())

from tunedeck.cli import main

raise SystemExit(main())

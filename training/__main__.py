import sys

if sys.argv[1:2] == ["composites"]:  # the composite donor bank (training/composites.py): no torch, no run dir
    from .composites import main as composites_main

    raise SystemExit(composites_main(sys.argv[2:]))

from .cli import main

raise SystemExit(main())

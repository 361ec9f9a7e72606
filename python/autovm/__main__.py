"""`python3 -m autovm`: where the package finds autovm-plan and libautovm (autovm/locate.py)."""
from .locate import main

raise SystemExit(main())

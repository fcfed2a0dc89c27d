import sys

from smg.cli import main

sys.exit(main())

import sys

from term_fl.cli import main

sys.exit(main())

import sys

from gpusleuth.cli.main import main

sys.exit(main())

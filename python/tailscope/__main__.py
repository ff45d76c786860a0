import sys

from tailscope.cli import main

sys.exit(main())

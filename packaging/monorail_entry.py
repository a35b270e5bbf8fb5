"""Entry point of the frozen bundle (PyInstaller): the CLI, which opens the app with no arguments."""

import multiprocessing
import sys

if __name__ == "__main__":
    multiprocessing.freeze_support()   # the spawned engine worker re-enters this executable
    from engine.cli import main

    sys.exit(main())

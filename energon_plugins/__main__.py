"""``python -m energon_plugins``."""

from energon_plugins.cli import main

if __name__ == "__main__":
    main()

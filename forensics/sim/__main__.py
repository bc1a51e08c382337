"""``python -m forensics.sim [flags]``: run the simulated SGLang server."""

from forensics.sim.server import main

if __name__ == "__main__":
    main()

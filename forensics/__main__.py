from forensics.entry import main

if __name__ == "__main__":  # not when a spawned worker imports it (forensics/ingest/pool.py)
    main()

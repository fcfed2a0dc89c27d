"""Helpers shared by tests in more than one folder (tests/ is on sys.path: `import support...`)."""

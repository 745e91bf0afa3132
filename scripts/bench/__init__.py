"""ponder's benchmark suite (not part of the test suite): see README.md here."""

"""Lambda handlers. The only code that reads environment variables."""

"""Child workflows (``child``): placeholder filled in below."""

"""Dataset loaders, generators, splits and training tuples."""

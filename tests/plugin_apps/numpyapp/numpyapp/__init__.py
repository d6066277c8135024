"""numpyapp: A Flower / NumPy app."""

"""jaxapp: A Flower / JAX app."""

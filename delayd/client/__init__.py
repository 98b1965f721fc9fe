"""The producer API: Client and AsyncClient over the same steps, errors, listings."""

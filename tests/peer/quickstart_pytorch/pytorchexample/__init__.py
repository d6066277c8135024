"""pytorchexample: a Flower / PyTorch app in the shape of Flower's quickstart-pytorch, for term-fl's peer tests."""

"""sklearnapp: A Flower / sklearn app."""

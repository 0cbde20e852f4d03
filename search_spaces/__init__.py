"""Decision variables, their domains and the hard rules; CP-SAT and Optuna encodings."""
